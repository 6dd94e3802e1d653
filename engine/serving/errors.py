"""The errors the engine's public API raises (each message is one line a user can act on).

Images and checkpoints have their own: `engine.model.image.ImageError`,
`engine.model.checkpoint.CheckpointError`."""

from __future__ import annotations


class RequestError(ValueError):
    """A request the engine refuses; the message says what is wrong with it."""


class EngineBusy(RuntimeError):
    """The request queue is full; try again later."""


class Cancelled(Exception):
    """The request was cancelled before it finished."""


class DeadlineExceeded(TimeoutError):
    """The request's deadline passed before it finished."""

"""What the UI and the batch tool share: opening the engine, image suffixes."""

from __future__ import annotations

from pathlib import Path

from engine import DEFAULT_WEIGHTS, MAX_OBJECTS_LIMIT, CheckpointError, Engine

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
DTYPES = ("fp32", "bf16", "fp16")


def open_engine(weights: str | Path | None, *, device: str = "cpu", dtype: str = "fp32", max_batch: int = 16,
                max_objects: int = MAX_OBJECTS_LIMIT) -> Engine:
    """Load a checkpoint (None: the embedded model) sized for requests of up to `max_objects` objects.

    Raises engine.CheckpointError (a ValueError) with a readable message when the
    directory is missing or is not a checkpoint.
    """
    directory = Path(weights) if weights is not None else DEFAULT_WEIGHTS
    if not directory.is_dir():
        hint = "" if weights is not None else " (the embedded model is not installed; pass --weights DIR)"
        raise CheckpointError(f"checkpoint directory {str(directory)!r} does not exist{hint}")
    return Engine.from_pretrained(directory, device=device, dtype=dtype, max_batch=max_batch, max_objects=max_objects)


def follow_umask(fd: int) -> None:
    """Give a file made by `tempfile.mkstemp` (always 0600) the mode a plain `open` would: 0666
    less the process umask, so every output file of a run gets the same permissions."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)

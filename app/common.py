"""What the UI and the batch tool share: opening the engine, image suffixes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engine import DEFAULT_WEIGHTS, MAX_OBJECTS_LIMIT, CheckpointError, DeviceError, Engine

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
#: What opening an engine raises for a bad checkpoint, tokenizer, Hub id or device (one-line messages).
LOAD_ERRORS = (CheckpointError, DeviceError, OSError)


def one_line(e: BaseException) -> str:
    """An error's message on one line, for a client or a log line."""
    return " ".join(str(e).split())


def open_engine(weights: str | Path | None, *, tokenizer: str | None = None, device: str = "auto",
                dtype: str = "auto", max_batch: int = 16, max_objects: int = MAX_OBJECTS_LIMIT,
                progress: bool = False, **config) -> Engine:
    """Load a checkpoint directory or Hub id (None: the embedded model) sized for requests of up to
    `max_objects` objects; `engine.model_info` says what runs. `config` overrides other
    `EngineConfig` fields (e.g. max_queue).

    Raises one of LOAD_ERRORS with a readable message when the weights, the tokenizer or the
    device cannot be used.
    """
    return Engine.from_pretrained(weights_or_default(weights), tokenizer=tokenizer, device=device, dtype=dtype,
                                  progress=progress, max_batch=max_batch, max_objects=max_objects, **config)


def warm_up(engine: Engine) -> None:
    """Capture the engine's CUDA graphs before the first request (`Engine.warm_up`; the UI and the
    HTTP server do this at start), saying so on stderr. Nothing happens on the CPU."""
    start = time.perf_counter()
    graphs = engine.warm_up()
    if graphs:
        print(f"captured {graphs} CUDA graphs in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def weights_or_default(weights: str | Path | None) -> str | Path:
    """`weights`, or the embedded model's directory (CheckpointError when it is not installed)."""
    if weights is not None:
        return weights
    if not DEFAULT_WEIGHTS.is_dir():
        raise CheckpointError(f"checkpoint directory {str(DEFAULT_WEIGHTS)!r} does not exist (the embedded model is "
                              "not installed; pass --weights DIR or a Hub id such as vikhyatk/moondream2)")
    return DEFAULT_WEIGHTS


def startup_line(engine: Engine) -> str:
    """The line the CLI and the batch tool print on stderr: model, parameters, device, dtype."""
    info = engine.model_info
    return f"model: {info.describe()}" if info is not None else "model: (constructed directly)"


def follow_umask(fd: int) -> None:
    """Give a file made by `tempfile.mkstemp` (always 0600) the mode a plain `open` would: 0666
    less the process umask, so every output file of a run gets the same permissions."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)

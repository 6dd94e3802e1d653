"""mdpipe's engine: the public API.

    from engine import Engine, EngineConfig
    engine = Engine.from_pretrained("vikhyatk/moondream2", device="cuda", max_batch=32).start()
    engine.detect("photo.jpg", "car")     # {"objects": [{"x_min", "y_min", "x_max", "y_max"}, ...]}
    engine.query("photo.jpg", "Is it a car?", answer=Choices(["yes", "no"]))   # {"answer": "yes"}

Names are resolved lazily (PEP 562), so `import engine.training.train` or `import
engine.model` does not load the serving stack (grammars, outlines-core).

Rooms: `engine.serving` (step loop, scheduler, skills, limits), `engine.worker` (runner,
slots, streams, pipeline state), `engine.model` (network, checkpoint, tokenizer, reference
decoder), `engine.kernels` (Triton with PyTorch fallbacks), `engine.training` (scenes,
training, evaluation), `engine.tools` (benchmarks, soak).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Engine": "engine.serving.engine",
    "RequestHandle": "engine.serving.engine",
    "DEFAULT_WEIGHTS": "engine.serving.engine",
    "EngineConfig": "engine.serving.config",
    "RequestError": "engine.serving.errors",
    "EngineBusy": "engine.serving.errors",
    "Cancelled": "engine.serving.errors",
    "DeadlineExceeded": "engine.serving.errors",
    "ImageError": "engine.model.image",
    "load_image": "engine.model.image",
    "DecodedImage": "engine.serving.crops",
    "prepare_image": "engine.serving.crops",
    "CheckpointError": "engine.model.checkpoint",
    "DeviceError": "engine.model.device",
    "ModelInfo": "engine.model.pretrained",
    "SKILLS": "engine.serving.skills",
    "OBJECT_SKILLS": "engine.serving.skills",
    "validate_request": "engine.serving.skills",
    "normalize_query": "engine.serving.skills",
    "Point": "engine.serving.skills",
    "Box": "engine.serving.skills",
    "PointResult": "engine.serving.skills",
    "DetectResult": "engine.serving.skills",
    "QueryResult": "engine.serving.skills",
    "CaptionResult": "engine.serving.skills",
    "Choices": "engine.serving.answers",
    "Regex": "engine.serving.answers",
    "JsonSchema": "engine.serving.answers",
    "DEFAULT_MAX_OBJECTS": "engine.serving.limits",
    "DEFAULT_MAX_TOKENS": "engine.serving.limits",
    "MAX_OBJECTS_LIMIT": "engine.serving.limits",
    "UI_MAX_OBJECTS": "engine.serving.limits",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from engine.model.checkpoint import CheckpointError  # noqa: F401
    from engine.model.device import DeviceError  # noqa: F401
    from engine.model.pretrained import ModelInfo  # noqa: F401
    from engine.model.image import ImageError, load_image  # noqa: F401
    from engine.serving.config import EngineConfig  # noqa: F401
    from engine.serving.crops import DecodedImage, prepare_image  # noqa: F401
    from engine.serving.engine import DEFAULT_WEIGHTS, Engine, RequestHandle  # noqa: F401
    from engine.serving.errors import Cancelled, DeadlineExceeded, EngineBusy, RequestError  # noqa: F401
    from engine.serving.answers import Choices, JsonSchema, Regex  # noqa: F401
    from engine.serving.limits import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_TOKENS, MAX_OBJECTS_LIMIT, UI_MAX_OBJECTS  # noqa: F401
    from engine.serving.skills import (OBJECT_SKILLS, SKILLS, Box, CaptionResult, DetectResult,  # noqa: F401
                                       Point, PointResult, QueryResult, normalize_query, validate_request)

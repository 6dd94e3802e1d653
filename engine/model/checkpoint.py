"""Checkpoint directories laid out like the official `vikhyatk/moondream2` release.

    DIR/model.safetensors   every key is `model.` + a module path (592 tensors for Moondream 2)
    DIR/tokenizer.json      a `tokenizers` tokenizer
    DIR/config.json         optional; its `"config"` object overrides the moondream2 preset
                            (the official file has `"config": {}`)

Loading is strict and checks the safetensors header before reading any tensor, so a
hostile or truncated file costs no large allocation and yields one error listing every problem.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from engine.model.config import MOONDREAM2, PRESETS, MoondreamConfig
from engine.model.moondream import MoondreamModel
from engine.model.vocabulary import Vocabulary

WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
KEY_PREFIX = "model."
MAX_HEADER_BYTES = 16 * 1024 * 1024  # the real Moondream 2 header is ~60 KB
MAX_HEADER_ENTRIES = 100_000
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
_SAFETENSORS_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
_FLOAT_DTYPES = {"BF16", "F16", "F32", "F64"}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message lists every problem found."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def load_config(directory: Path) -> MoondreamConfig:
    path = directory / CONFIG_FILE
    if not path.exists():
        return MOONDREAM2
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    overrides = data.get("config", {})
    if not isinstance(overrides, dict):
        raise CheckpointError(f"{path}: \"config\" must be an object")
    base = PRESETS.get(overrides.get("preset", "moondream2"))
    if base is None:
        raise CheckpointError(f"{path}: unknown preset {overrides.get('preset')!r}")
    try:
        return MoondreamConfig.from_dict(overrides, base=base)
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None


def load_vocabulary(directory: Path) -> Vocabulary | None:
    """The `"vocabulary"` entry of DIR/config.json (see engine.model.vocabulary), or None."""
    path = directory / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None   # load_config reports an unreadable file
    if not isinstance(data, dict) or "vocabulary" not in data:
        return None
    try:
        return Vocabulary.from_dict(data["vocabulary"])
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Validate a safetensors header against the file size; return key → dtype/shape."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: truncated ({size} bytes; a safetensors file starts with an 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise CheckpointError(f"{path}: header length {n} is larger than the file ({size} bytes) or absurd; file is corrupt or truncated")
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: header is not valid JSON ({e})") from None
    if len(header) > MAX_HEADER_ENTRIES:
        raise CheckpointError(f"{path}: header lists {len(header)} tensors; at most {MAX_HEADER_ENTRIES} are accepted")
    data_size = size - 8 - n
    infos, problems = {}, []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            nbytes = _SAFETENSORS_BYTES[dtype] * math.prod(shape)
        except (KeyError, TypeError, ValueError):
            problems.append(f"{key}: malformed header entry")
            continue
        if not (0 <= begin <= end <= data_size) or end - begin != nbytes:
            problems.append(f"{key}: data range {begin}..{end} does not fit the file (truncated?)")
            continue
        infos[key] = TensorInfo(dtype, shape)
    if problems:
        raise CheckpointError(f"{path}: " + "; ".join(problems[:20]) + (f"; and {len(problems) - 20} more" if len(problems) > 20 else ""))
    return infos


def expected_tensors(config: MoondreamConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint key → shape for `config`, computed on the meta device (no allocation)."""
    model = MoondreamModel(config, device="meta")
    return {KEY_PREFIX + k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_tensors(found: dict[str, TensorInfo], config: MoondreamConfig) -> None:
    expected = expected_tensors(config)
    problems = []
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing:
        problems.append(f"{len(missing)} missing keys: " + ", ".join(missing[:10]) + (" …" if len(missing) > 10 else ""))
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys: " + ", ".join(unexpected[:10]) + (" …" if len(unexpected) > 10 else ""))
    mismatched = []
    for key in sorted(set(expected) & set(found)):
        if found[key].shape != expected[key]:
            mismatched.append(f"{key}: shape {list(found[key].shape)}, expected {list(expected[key])}")
        elif found[key].dtype not in _FLOAT_DTYPES:
            mismatched.append(f"{key}: dtype {found[key].dtype}, expected a floating-point type")
    problems += mismatched[:10] + ([f"and {len(mismatched) - 10} more mismatched tensors"] if len(mismatched) > 10 else [])
    if problems:
        raise CheckpointError("checkpoint does not match the model: " + "; ".join(problems))


def load_model(directory: str | Path, *, dtype: str | torch.dtype = "fp32", device: str | torch.device = "cpu",
               config: MoondreamConfig | None = None, progress: bool = False) -> MoondreamModel:
    """Load a checkpoint directory strictly into a `MoondreamModel` of the requested dtype
    (`progress`: a tqdm bar of tensors read, on stderr)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a checkpoint directory")
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{directory}: no {WEIGHTS_FILE}")
    config = config or load_config(directory)
    found = read_header(weights)
    check_tensors(found, config)
    torch_dtype = parse_dtype(dtype)
    needed = sum(math.prod(t.shape) for t in found.values()) * torch_dtype.itemsize
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        raise CheckpointError(f"{weights}: the model is too large: {needed / 2**30:.1f} GiB as {torch_dtype}, "
                              f"more than this machine's {memory / 2**30:.1f} GiB of memory")
    state, nonfinite = {}, []
    try:
        with safe_open(str(weights), framework="pt", device="cpu") as f:
            for key in tqdm(f.keys(), desc="loading weights", unit="tensor", disable=not progress, file=sys.stderr):
                t = f.get_tensor(key)
                if not torch.isfinite(t).all():
                    nonfinite.append(key)
                state[key[len(KEY_PREFIX):]] = t.to(device=device, dtype=torch_dtype)
    except Exception as e:  # safetensors raises its own error types for corrupt payloads
        raise CheckpointError(f"{weights}: cannot read tensors ({e})") from None
    if nonfinite:
        import warnings

        warnings.warn(f"{weights}: {len(nonfinite)} tensors contain NaN/Inf: {', '.join(nonfinite[:5])}", stacklevel=2)
    model = MoondreamModel(config, device="meta")
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


@torch.no_grad()
def init_random_(model: MoondreamModel, *, seed: int = 0, std: float = 0.02) -> MoondreamModel:
    """Random weights in place, on the model's own device: N(0, std) matrices, LayerNorm (1, 0),
    zero biases; Fourier feature matrices get std 1 so coordinate embeddings are not all alike."""
    gen = torch.Generator(device=model.device).manual_seed(seed)
    norm_weights = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    for name, param in model.named_parameters():
        if name in norm_weights:
            param.fill_(1.0)
        elif name.endswith(".bias"):
            param.zero_()
        else:
            sample = torch.randn(param.shape, generator=gen, device=param.device, dtype=torch.float32)
            param.copy_(sample if name.endswith("_features") else sample * std)
    return model


def random_state_dict(config: MoondreamConfig, *, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                      std: float = 0.02) -> dict[str, torch.Tensor]:
    """Checkpoint-keyed random weights (see `init_random_`)."""
    model = init_random_(MoondreamModel(config, device="cpu", dtype=dtype), seed=seed, std=std)
    return {KEY_PREFIX + k: v.contiguous() for k, v in model.state_dict().items()}


def save_checkpoint(directory: str | Path, state: dict[str, torch.Tensor], config: MoondreamConfig,
                    tokenizer_json: str, *, preset: str | None = None, vocabulary: Vocabulary | None = None) -> Path:
    """Write the three files of the release layout. `state` is checkpoint-keyed."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / WEIGHTS_FILE))
    (directory / TOKENIZER_FILE).write_text(tokenizer_json, encoding="utf-8")
    overrides = {} if config == MOONDREAM2 else {**config.to_dict(), **({"preset": preset} if preset else {})}
    meta = {"model_type": "moondream1", "architectures": ["HfMoondream"], "torch_dtype": "bfloat16", "config": overrides}
    if vocabulary is not None:
        meta["vocabulary"] = vocabulary.to_dict()
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return directory

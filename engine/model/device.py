"""Where and in what precision the model runs: `--device auto|cpu|cuda[:N]`, `--dtype auto|fp32|bf16|fp16`.

`auto` picks CUDA with bfloat16 when a CUDA device is usable (fp16 on GPUs without bf16),
else the CPU: bfloat16 where the CPU multiplies it natively (AVX512-BF16 or AMX), float32
elsewhere. Asking for CUDA without a CUDA build of PyTorch or without a visible device is a
`DeviceError` that says which, and how to fix it.
"""

from __future__ import annotations

import re

import torch

from engine.model.checkpoint import DTYPES

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")   # what the command lines offer
CUDA_INSTALL = "a CUDA build of torch (https://pytorch.org/get-started/locally/)"


class DeviceError(ValueError):
    """A device or dtype that this machine cannot run; the message says how to fix it."""


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """`auto` → cuda:0 when usable, else cpu; `cuda[:N]` checked against this build and machine."""
    name = str(device).strip().lower()
    if name == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match is None:
        raise DeviceError(f"unknown device {str(device)!r}; choose {DEVICE_CHOICES}")
    if torch.version.cuda is None:
        raise DeviceError(f"--device {name}: this PyTorch ({torch.__version__}) is built without CUDA; install "
                          f"{CUDA_INSTALL} or use --device cpu")
    if not torch.cuda.is_available():
        raise DeviceError(f"--device {name}: PyTorch has CUDA {torch.version.cuda} but sees no GPU (check the NVIDIA "
                          "driver with nvidia-smi, and CUDA_VISIBLE_DEVICES); or use --device cpu")
    index = int(match.group(1) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"--device {name}: only {count} CUDA device(s) visible (cuda:0..cuda:{count - 1})")
    return torch.device("cuda", index)


def cpu_computes_bf16() -> bool:
    """Whether this CPU has bf16 matrix instructions (AVX512-BF16 or AMX tiles): there bf16 runs faster than fp32;
    elsewhere PyTorch emulates it, slower than fp32."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")   # torch.cpu's own feature checks
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> str:
    """The dtype name for `device`: `auto` → bf16 on CUDA (fp16 where bf16 is unsupported); on the CPU bf16 where
    it is native (`cpu_computes_bf16`), else fp32."""
    names = {v: k for k, v in DTYPES.items()}
    name = names.get(dtype, "?") if isinstance(dtype, torch.dtype) else str(dtype).strip().lower()
    if name != "auto" and name not in DTYPES:   # fp64 too: the tests' near-exact comparisons use it
        raise DeviceError(f"unknown dtype {str(dtype)!r}; choose one of {', '.join(DTYPE_CHOICES)}")
    if name != "auto":
        return name
    if device is not None and device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if cpu_computes_bf16() else "fp32"


def resolve(device: str | torch.device = "auto", dtype: str | torch.dtype = "auto") -> tuple[torch.device, str]:
    """(torch device, dtype name) for the `--device` / `--dtype` pair."""
    dev = resolve_device(device)
    return dev, resolve_dtype(dtype, dev)

"""Hostile checkpoints beyond tests/test_checkpoint.py: memory, not only messages.

test_checkpoint.py already covers truncation at every boundary, header lengths past the file or
absurd, garbage header JSON, malformed entries, wrong dtypes and shapes, NaN/Inf warnings and
nonsense config.json dims (one CheckpointError each, before any model or tensor is allocated).
Here: headers declaring 100 GB tensors (with a tiny file, and with a *sparse* 100 GB file whose
header is self-consistent) must fail with one clear line while peak RSS barely moves, through
load_model and the `python -m engine` command line.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import engine.model.checkpoint as ckpt
from engine.model.checkpoint import CheckpointError, expected_tensors, load_config, load_model
from engine.model.config import TINY

from .conftest import torch_threads

ROOT = Path(__file__).resolve().parents[1]
GB100 = 50_000_000 * 512 * 4  # 102.4 GB of F32


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


def copy_without_weights(tiny_ckpt: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(tiny_ckpt / name, dest / name)
    return dest


def write_weights(path: Path, header: dict, data_size: int, *, sparse: bool) -> None:
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        if sparse:
            f.truncate(8 + len(raw) + data_size)  # holes: no disk blocks, no page cache
        else:
            f.write(b"\0" * 16)


@pytest.fixture(scope="module")
def hostile_dirs(tmp_path_factory, tiny_ckpt):
    root = tmp_path_factory.mktemp("hostile_ckpt")
    dirs = {}
    big = {"model.text.wte": {"dtype": "F32", "shape": [50_000_000, 512], "data_offsets": [0, GB100]}}
    d = dirs["100GB tensor, 16-byte file"] = copy_without_weights(tiny_ckpt, root / "tiny_file")
    write_weights(d / "model.safetensors", big, 16, sparse=False)
    d = dirs["100GB tensor, sparse 100GB file"] = copy_without_weights(tiny_ckpt, root / "sparse")
    write_weights(d / "model.safetensors", big, GB100, sparse=True)
    d = dirs["header length 2^63"] = copy_without_weights(tiny_ckpt, root / "absurd_len")
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    d = dirs["every tensor 100GB"] = copy_without_weights(tiny_ckpt, root / "all_big")
    header, offset = {}, 0
    for key in expected_tensors(TINY):
        header[key] = {"dtype": "F64", "shape": [GB100 // 8], "data_offsets": [offset, offset + GB100]}
        offset += GB100
    write_weights(d / "model.safetensors", header, 16, sparse=False)
    yield dirs
    for path in dirs.values():  # the sparse file takes no disk, but keep tools like du calm
        (path / "model.safetensors").unlink(missing_ok=True)


EXPECTED = {"100GB tensor, 16-byte file": "does not fit the file",
            "100GB tensor, sparse 100GB file": "checkpoint does not match the model",
            "header length 2^63": "header length 9223372036854775808",
            "every tensor 100GB": "does not fit the file"}

MEASURE = r"""
import json, resource, sys
import torch
torch.set_num_threads(1)
from engine.model.checkpoint import CheckpointError, load_model
load_model(sys.argv[1])  # warm up: a real (tiny) load, so the baseline includes torch's own allocations
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {}
for path in sys.argv[2:]:
    try:
        load_model(path)
        out[path] = "LOADED"
    except CheckpointError as e:
        out[path] = str(e)
out["growth_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps(out))
"""


def test_huge_declared_tensors_cost_no_memory(hostile_dirs, tiny_ckpt):
    """In a fresh process: peak RSS after these loads stays within 32 MiB of the warmed-up baseline."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    paths = [str(p) for p in hostile_dirs.values()]
    r = subprocess.run([sys.executable, "-c", MEASURE, str(tiny_ckpt), *paths], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for name, path in hostile_dirs.items():
        message = out[str(path)]
        assert message != "LOADED", name
        assert "\n" not in message and EXPECTED[name] in message, (name, message)
        assert len(message) < 4000, (name, len(message))
    assert out["growth_kib"] < 32 * 1024, f"peak RSS grew by {out['growth_kib'] / 1024:.0f} MiB"


def test_hostile_checkpoints_through_the_cli(hostile_dirs, tmp_path, capsys):
    from PIL import Image

    from engine.__main__ import main

    image = tmp_path / "i.png"
    Image.new("RGB", (32, 32), (9, 9, 9)).save(image)
    for name, path in hostile_dirs.items():
        assert main(["detect", str(image), "star", "--weights", str(path)]) == 2, name
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, (name, err)
        assert EXPECTED[name] in err and "Traceback" not in err


class _Read(BaseException):
    """Raised past every `except Exception` if tensor data is read."""


def test_self_consistent_huge_model_is_refused_before_reading(tmp_path, tiny_ckpt, monkeypatch):
    d = copy_without_weights(tiny_ckpt, tmp_path / "huge_ff")
    meta = json.loads((d / "config.json").read_text())
    # Every dimension within its own bound, yet together ~47 GiB of bf16 weights.
    meta["config"].setdefault("text", {}).update(dim=32768, n_heads=512, ff_dim=1 << 17)
    (d / "config.json").write_text(json.dumps(meta))
    config = load_config(d)  # accepted: each dimension is plausible
    header, offset = {}, 0
    for key, shape in expected_tensors(config).items():
        n = 2 * math.prod(shape)
        header[key] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    assert offset > 32 * 2**30  # more than this machine should ever be asked to allocate
    write_weights(d / "model.safetensors", header, offset, sparse=True)

    def no_read(*args, **kwargs):
        raise _Read(f"load_model started reading {offset / 2**30:.0f} GiB of tensor data")

    monkeypatch.setattr(ckpt, "safe_open", no_read)
    try:
        with pytest.raises(CheckpointError, match="too large|exceeds"):
            load_model(d)
    finally:
        (d / "model.safetensors").unlink()


def test_mismatch_error_stays_short(tmp_path, tiny_ckpt):
    d = tmp_path / "md2_config"
    shutil.copytree(tiny_ckpt, d)
    (d / "config.json").write_text(json.dumps({"config": {}}))  # the moondream2 preset over tiny weights
    with pytest.raises(CheckpointError) as info:
        load_model(d)
    assert len(str(info.value)) < 2000, len(str(info.value))

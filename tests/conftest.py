"""Shared fixtures: a stand-in tokenizer, random `tiny` checkpoints on disk, small images.

Everything is generated here, deterministically (fixed seeds), once per session.
"""

from __future__ import annotations

from contextlib import contextmanager
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# No test may touch the network: the Hugging Face Hub is offline and its cache an empty folder of
# this session (tests that need cached files write them, see hf_cache). Set before huggingface_hub
# is imported (it reads these once); subprocesses inherit them.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="hf-cache-")
atexit.register(shutil.rmtree, os.environ["HF_HUB_CACHE"], True)

import numpy as np
import pytest
import torch
from PIL import Image

from engine.model.checkpoint import load_model, random_state_dict, save_checkpoint
from engine.model.config import TINY
from engine.model.device import resolve_dtype
from engine.training.vocab import build_tokenizer

TINY_SEED = 0
# lm_head bias offsets that decide "another object?" (coord id 5 vs EOS id 0) before anything else
# can: the logits of a std-0.02 random head are ~0.2, far below these.
FORCE_BIAS = 8.0


# What `--dtype auto` gives on this machine's CPU: bf16 where the CPU computes it natively, else fp32.
CPU_AUTO_DTYPE = resolve_dtype("auto", torch.device("cpu"))


@contextmanager
def torch_threads(n: int):
    """Run with `n` intra-op threads. The tiny models gain nothing from threads, and on a small,
    shared machine oversubscribed OpenMP threads made these tests ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    """The offline stand-in BPE (512 tokens, special ids as in starmie)."""
    return build_tokenizer(vocab_size=TINY.text.vocab_size)


@pytest.fixture(scope="session")
def tiny_state() -> dict[str, torch.Tensor]:
    """Checkpoint-keyed bf16 random weights for the `tiny` preset (read-only: copy before editing)."""
    return random_state_dict(TINY, seed=TINY_SEED)


def write_tiny_checkpoint(directory: Path, state: dict[str, torch.Tensor], tokenizer) -> Path:
    return save_checkpoint(directory, state, TINY, tokenizer.to_str(), preset="tiny")


def with_lm_bias(state: dict[str, torch.Tensor], **offsets: float) -> dict[str, torch.Tensor]:
    """A copy of `state` whose lm_head bias has `offsets` ({"eos": x, "coord": y}) added."""
    ids = {"eos": TINY.tokens.eos_id, "coord": TINY.tokens.coord_id}
    out = dict(state)
    bias = state["model.text.lm_head.bias"].clone()
    for name, value in offsets.items():
        bias[ids[name]] += value
    out["model.text.lm_head.bias"] = bias
    return out


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory, tiny_state, tokenizer) -> Path:
    """A complete `tiny` checkpoint directory: model.safetensors, tokenizer.json, config.json."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt"), tiny_state, tokenizer)


@pytest.fixture(scope="session")
def eager_ckpt(tmp_path_factory, tiny_state, tokenizer) -> Path:
    """`tiny` weights whose language head always prefers coord over EOS: every request hits max_objects."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("eager_ckpt"), with_lm_bias(tiny_state, coord=FORCE_BIAS),
                                 tokenizer)


@pytest.fixture(scope="session")
def mute_ckpt(tmp_path_factory, tiny_state, tokenizer) -> Path:
    """`tiny` weights whose language head always prefers EOS: every request finds nothing."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("mute_ckpt"), with_lm_bias(tiny_state, eos=FORCE_BIAS),
                                 tokenizer)


@pytest.fixture(scope="session")
def tiny_model64(tiny_ckpt):
    """The tiny checkpoint loaded in float64, for near-exact comparisons. Do not mutate."""
    return load_model(tiny_ckpt, dtype="fp64")


def random_image(seed: int, height: int = 100, width: int = 150) -> np.ndarray:
    return (np.random.default_rng(seed).random((height, width, 3)) * 255).astype(np.uint8)


@pytest.fixture(scope="session")
def small_image() -> np.ndarray:
    """A 100×150 random RGB uint8 image (one global crop + a 1×1 tiling in the tiny geometry)."""
    return random_image(0)


@pytest.fixture(scope="session")
def small_image_png(tmp_path_factory, small_image) -> Path:
    path = tmp_path_factory.mktemp("images") / "small.png"
    Image.fromarray(small_image).save(path)
    return path


def make_checkpoint(dest: Path, seed: int) -> Path:
    """A random `tiny` checkpoint written by the real CLI (`python -m engine random-checkpoint`)."""
    subprocess.run([sys.executable, "-m", "engine", "random-checkpoint", str(dest), "--preset", "tiny",
                    "--seed", str(seed)], check=True, cwd=Path(__file__).resolve().parent.parent, capture_output=True)
    return dest


def hf_cache_snapshot(cache: Path, repo_id: str, revision: str, files: dict[str, bytes],
                      commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """Write `files` into a Hugging Face cache in its standard layout, as a download of `repo_id` at
    `revision` would: models--org--name/refs/<revision> holds the commit, snapshots/<commit>/ the files."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    return snapshot


def checkpoint_files(directory: Path, names: tuple[str, ...] = ("model.safetensors", "config.json", "tokenizer.json")
                     ) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in names}


@pytest.fixture
def one_thread():
    # A shared 2-core machine: OpenMP with 2 threads next to another busy process can be 10x slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

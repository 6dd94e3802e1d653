"""`python -m engine …` as a user runs it: real subprocesses, exit codes, stdout JSON, stderr errors.

The cases the command line is for (write a checkpoint, detect, point, and the three errors a user
meets first) run as subprocesses, started together by the module fixture `cli` since each costs a
torch import; the tests then check one invocation each. Further error cases call the same
`engine.__main__.main` in-process and check its exit code and stderr the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from engine.model.checkpoint import load_model, random_state_dict
from engine.model.config import TINY
from engine.model.image import load_image, overlap_crop_image
from engine.model.reference import reference_generate
from engine.serving.skills import prompt_ids
from engine.model.tokenizer import load_tokenizer

from .conftest import torch_threads


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"python -m engine {' '.join(self.args)} → {self.returncode}\nstdout: {self.stdout}\nstderr: {self.stderr}"


def run_cli(*args: str) -> Run:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    return Run(args, p.returncode, p.stdout, p.stderr)


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_ckpt, eager_ckpt, small_image_png):
    d = tmp_path_factory.mktemp("cli")
    garbage = d / "garbage.png"
    garbage.write_bytes(b"this is not an image at all" * 10)
    truncated = d / "truncated.png"
    data = small_image_png.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    broken_weights = d / "broken_weights"
    broken_weights.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (broken_weights / name).write_bytes((tiny_ckpt / name).read_bytes())
    (broken_weights / "model.safetensors").write_bytes((tiny_ckpt / "model.safetensors").read_bytes()[:5000])
    no_tokenizer = d / "no_tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((tiny_ckpt / name).read_bytes())
    return {"out": d / "random_ckpt", "image": small_image_png, "missing": d / "nope.png", "garbage": garbage,
            "truncated": truncated, "eager": eager_ckpt, "tiny": tiny_ckpt, "nowhere": d / "no_such_dir",
            "broken_weights": broken_weights, "no_tokenizer": no_tokenizer}


def invocations(p: dict[str, Path]) -> dict[str, tuple[str, ...]]:
    img, eager = str(p["image"]), str(p["eager"])
    return {
        "random": ("random-checkpoint", str(p["out"]), "--preset", "tiny", "--seed", "3"),
        "detect": ("detect", img, "red circle", "--weights", eager, "--max-objects", "3"),
        "point": ("point", img, "red circle", "--weights", eager, "--max-objects", "3"),
        "missing_image": ("point", str(p["missing"]), "cat", "--weights", eager),
        "truncated_image": ("point", str(p["truncated"]), "cat", "--weights", eager),
        "no_weights_dir": ("detect", img, "cat", "--weights", str(p["nowhere"])),
    }


@pytest.fixture(scope="module")
def cli(paths) -> dict[str, Run]:
    calls = invocations(paths)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(run_cli, *args) for name, args in calls.items()}
        return {name: f.result() for name, f in futures.items()}


def assert_clean_error(run: Run, *fragments: str) -> None:
    assert run.returncode == 2, run
    assert run.stdout == "", run
    assert "Traceback" not in run.stderr, run
    line = run.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line, run
    for fragment in fragments:
        assert fragment in line, run


# ---- random-checkpoint -----------------------------------------------------------------------

def test_random_checkpoint_writes_the_three_files(cli, paths):
    run = cli["random"]
    assert run.returncode == 0, run
    out = paths["out"]
    assert f"wrote tiny checkpoint to {out}" in run.stdout
    assert sorted(f.name for f in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["model_type"] == "moondream1" and meta["config"]["preset"] == "tiny"
    model = load_model(out, dtype="bf16")
    assert model.config == TINY
    expected = random_state_dict(TINY, seed=3)
    state = model.state_dict()
    assert all(torch.equal(state[k[len("model."):]], v) for k, v in expected.items())
    tok = load_tokenizer(out)
    assert tok.get_vocab_size() <= TINY.text.vocab_size and tok.token_to_id("detect") == TINY.tokens.detect_prefix[1]


# ---- detect / point --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def eager_fp32(paths):
    return load_model(paths["eager"], dtype="fp32"), load_tokenizer(paths["eager"])


def reference_for(eager_fp32, paths, skill: str, obj: str, cap: int) -> dict:
    model, tok = eager_fp32
    crops = overlap_crop_image(load_image(paths["image"]), TINY.vision)
    return reference_generate(model, crops, prompt_ids(TINY.tokens, lambda s: tok.encode(s).ids, skill, obj), skill, cap)


def test_detect_prints_objects_json(cli, paths, eager_fp32):
    run = cli["detect"]
    assert run.returncode == 0, run
    assert run.stdout.count("\n") == 1  # one JSON document on one line
    result = json.loads(run.stdout)
    # the eager checkpoint never sends EOS; the repetition guard may end the answer at a duplicate
    assert list(result) == ["objects"] and 1 <= len(result["objects"]) <= 3
    for box in result["objects"]:
        assert list(box) == ["x_min", "y_min", "x_max", "y_max", "score"]
        assert all(isinstance(v, float) and 0 <= v <= 1 for v in box.values())
        assert box["x_min"] <= box["x_max"] and box["y_min"] <= box["y_max"]
    assert result == reference_for(eager_fp32, paths, "detect", "red circle", 3)


def test_point_prints_points_json(cli, paths, eager_fp32):
    run = cli["point"]
    assert run.returncode == 0, run
    result = json.loads(run.stdout)
    assert list(result) == ["points"] and 1 <= len(result["points"]) <= 3
    for pt in result["points"]:
        assert list(pt) == ["x", "y", "score"]
        assert all(isinstance(v, float) and 0 <= v < 1 for k, v in pt.items() if k != "score")
    assert result == reference_for(eager_fp32, paths, "point", "red circle", 3)


# ---- errors --------------------------------------------------------------------------------

def test_missing_image_path(cli, paths):
    assert_clean_error(cli["missing_image"], str(paths["missing"]), "file not found")


def test_truncated_image_file(cli, paths):
    assert_clean_error(cli["truncated_image"], str(paths["truncated"]), "truncated or corrupt")


def test_weights_directory_missing(cli, paths):
    assert_clean_error(cli["no_weights_dir"], str(paths["nowhere"]), "not a checkpoint directory")


# ---- the same entry point in-process (no torch import per case) ------------------------------

def run_main(capsys, *args: str) -> Run:
    from engine.__main__ import main

    try:
        code = main(list(args))
    except SystemExit as e:  # argparse
        code = e.code
    out = capsys.readouterr()
    return Run(args, code, out.out, out.err)


def test_blocking_mode_prints_the_same(cli, paths, capsys):
    run = run_main(capsys, "point", str(paths["image"]), "red circle", "--weights", str(paths["eager"]),
                   "--max-objects", "3", "--blocking")
    assert run.returncode == 0, run
    assert json.loads(run.stdout) == json.loads(cli["point"].stdout)


def test_default_max_objects_on_a_random_checkpoint(paths, capsys):
    run = run_main(capsys, "detect", str(paths["image"]), "cat", "--weights", str(paths["tiny"]))
    assert run.returncode == 0, run
    result = json.loads(run.stdout)
    assert list(result) == ["objects"] and len(result["objects"]) <= 50


def test_garbage_image_file(paths, capsys):
    run = run_main(capsys, "detect", str(paths["garbage"]), "cat", "--weights", str(paths["eager"]))
    assert_clean_error(run, str(paths["garbage"]), "not a recognised image format")


def test_image_path_is_a_directory(paths, capsys, tmp_path):
    run = run_main(capsys, "detect", str(tmp_path), "cat", "--weights", str(paths["eager"]))
    assert_clean_error(run, "is a directory")


def test_weights_file_truncated(paths, capsys):
    run = run_main(capsys, "detect", str(paths["image"]), "cat", "--weights", str(paths["broken_weights"]))
    assert_clean_error(run, "model.safetensors", "truncated")


def test_weights_directory_without_tokenizer(paths, capsys):
    run = run_main(capsys, "point", str(paths["image"]), "cat", "--weights", str(paths["no_tokenizer"]))
    assert_clean_error(run, "tokenizer.json")


def test_max_objects_out_of_range(paths, capsys):
    run = run_main(capsys, "point", str(paths["image"]), "cat", "--weights", str(paths["eager"]), "--max-objects", "0")
    assert_clean_error(run, "max_objects must be between 1 and 200, got 0")


def test_blank_object_text(paths, capsys):
    run = run_main(capsys, "detect", str(paths["image"]), "   ", "--weights", str(paths["eager"]))
    assert_clean_error(run, "the object to find is empty")


def test_too_many_objects(paths, capsys):
    run = run_main(capsys, "point", str(paths["image"]), "cat", "--weights", str(paths["eager"]), "--max-objects", "201")
    assert_clean_error(run, "max_objects must be between 1 and 200, got 201")


def test_usage_errors_exit_2(capsys):
    run = run_main(capsys, "detect")
    assert run.returncode == 2 and "usage:" in run.stderr and run.stdout == ""
    run = run_main(capsys, "random-checkpoint", "x", "--preset", "huge")
    assert run.returncode == 2 and "invalid choice: 'huge'" in run.stderr

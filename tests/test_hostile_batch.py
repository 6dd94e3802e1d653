"""app.batch under crashes and hostile folders: repeated SIGKILLs, symlinks, OUT through `..`.

* Crash safety: the tool is SIGKILLed at random points several times (and a torn line is left as a
  crash inside a write would leave it), then re-run to the end: exactly one record per image, the
  JSONL never corrupt, coco.json regenerated from it.
* Writes stay under OUT: symlinks in DIR that point outside, an OUT spelled through `..`, and
  symlinks planted inside OUT never make the tool write anywhere else.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.batch import main as batch_main

from tests import batch_child

from .conftest import torch_threads

ROOT = Path(__file__).resolve().parents[1]
OBJECT = "red circle"


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


def picture(i: int, size=(48, 40)) -> Image.Image:
    rng = np.random.default_rng(100 + i)
    return Image.fromarray((rng.random((size[1], size[0], 3)) * 255).astype(np.uint8))


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under root (not following symlinks): file bytes, link targets, folders."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            found[rel] = ("link", os.readlink(p)) if p.is_symlink() else ("dir",) if p.is_dir() else p.read_bytes()
    return found


def jsonl_lines(path: Path) -> tuple[list[dict], bytes]:
    """The complete records and the torn tail (bytes after the last newline)."""
    data = path.read_bytes() if path.exists() else b""
    body, _, tail = data.rpartition(b"\n")
    lines = [json.loads(line) for line in body.split(b"\n") if line.strip()] if body else []
    return lines, tail


def test_repeated_sigkill_then_resume(tmp_path, tiny_ckpt):
    src, out = tmp_path / "photos", tmp_path / "photos-out"
    (src / "sub").mkdir(parents=True)
    good = []
    for i in range(80):
        rel = f"{'sub/' if i % 5 == 4 else ''}img{i:03d}.png"
        picture(i).save(src / rel)
        good.append(rel)
    (src / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
    (src / "empty.png").write_bytes(b"")
    bad = ["broken.jpg", "empty.png"]
    jsonl = out / "results.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "app.batch", str(src), "--task", "detect", "--object", OBJECT, "--out", str(out),
           "--recursive", "--weights", str(tiny_ckpt), "--max-objects", "3", "--quiet", "--window", "1",
           "--max-batch", "1"]
    rng = random.Random(7)
    kills, repaired = 0, False
    for round_ in range(4):
        before = len(jsonl_lines(jsonl)[0])
        target = before + rng.randint(1, 8)
        # The run stops itself right after its target-th new record; killed there, the next request
        # may be mid-inference (half a written line is planted separately, below).
        proc = batch_child.start(target - before, cmd[3:], cwd=ROOT, env=env)
        proc.send_signal(signal.SIGKILL)
        kills += 1
        _, stderr = proc.communicate(timeout=30)
        if "cut a torn last line" in stderr:
            repaired = True
        assert "Traceback" not in stderr, stderr
        lines, tail = jsonl_lines(jsonl)
        paths = [r["path"] for r in lines]
        assert len(paths) == len(set(paths)), "a record was written twice"
        assert set(paths) <= set(good + bad)
        if round_ == 1:  # a crash in the middle of a write leaves half a line
            with open(jsonl, "ab") as f:
                f.write(b'{"path": "img079.png", "width": 48, "res')
    assert kills >= 3, "the runs ended before they could be killed; make the folder larger"

    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr  # the two broken files
    repaired = repaired or "cut a torn last line" in r.stderr
    assert repaired
    assert "Traceback" not in r.stdout + r.stderr
    data = jsonl.read_bytes()
    assert data.endswith(b"\n")
    records = [json.loads(line) for line in data.splitlines()]  # every line valid JSON
    paths = [rec["path"] for rec in records]
    assert sorted(paths) == sorted(good + bad)  # exactly one record per image
    assert all("result" in rec for rec in records if rec["path"] in good)
    assert all("error" in rec for rec in records if rec["path"] in bad)
    coco = json.loads((out / "coco.json").read_text())
    assert sorted(img["file_name"] for img in coco["images"]) == sorted(good)
    n_found = sum(len(rec["result"]["objects"]) for rec in records if "result" in rec)
    assert len(coco["annotations"]) == n_found
    # and a re-run after all that has nothing left to do
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "(0 new, 82 already recorded)" in r.stdout
    assert jsonl.read_bytes() == data


def test_symlinks_in_dir_pointing_outside(tmp_path, tiny_ckpt, capsys):
    outside, src, out = tmp_path / "outside", tmp_path / "src", tmp_path / "out"
    (outside / "deep").mkdir(parents=True)
    picture(1).save(outside / "secret.png")
    picture(2).save(outside / "deep" / "hidden.png")
    src.mkdir()
    picture(3).save(src / "a.png")
    os.symlink(outside / "secret.png", src / "link.png")  # a file elsewhere: read, never written
    os.symlink(outside, src / "linkdir")  # a folder elsewhere: not followed
    os.symlink(outside / "deep", src / "deep")
    before_outside, before_src = snapshot(outside), snapshot(src)
    before_top = sorted(p.name for p in tmp_path.iterdir())
    rc = batch_main([str(src), "--task", "detect", "--object", OBJECT, "--out", str(out), "--recursive", "--draw",
                     "--weights", str(tiny_ckpt), "--max-objects", "2", "--quiet"])
    capsys.readouterr()
    assert rc == 0
    assert snapshot(outside) == before_outside and snapshot(src) == before_src
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before_top + ["out"])
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["path"] for r in records) == ["a.png", "link.png"]
    assert (out / "annotated" / "link.png").is_file() and not (out / "annotated" / "link.png").is_symlink()


def test_out_spelled_through_dotdot(tmp_path, tiny_ckpt, capsys):
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    picture(4).save(src / "a.png")
    picture(5).save(src / "x" / "b.png")
    before_src = snapshot(src)
    before_top = sorted(p.name for p in tmp_path.iterdir())
    out = src / "x" / ".." / ".." / "dotdot-out"  # = tmp_path/dotdot-out
    args = ["--task", "point", "--object", OBJECT, "--recursive", "--draw", "--weights", str(tiny_ckpt),
            "--max-objects", "2", "--quiet"]
    assert batch_main([str(src), *args, "--out", str(out)]) == 0
    assert snapshot(src) == before_src
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before_top + ["dotdot-out"])
    assert sorted(snapshot(tmp_path / "dotdot-out")) == ["annotated", "annotated/a.png", "annotated/x",
                                                         "annotated/x/b.png", "coco.json", "results.jsonl"]
    # an OUT inside DIR, spelled through `..`: written there, never scanned as input
    inner = src / "x" / ".." / "inner-out"
    assert batch_main([str(src), *args, "--out", str(inner)]) == 0
    assert batch_main([str(src), *args, "--out", str(inner)]) == 0
    out_text = capsys.readouterr().out
    assert "(0 new, 2 already recorded)" in out_text
    assert len((src / "inner-out" / "results.jsonl").read_text().splitlines()) == 2


def test_symlinks_planted_in_out_are_not_followed(tmp_path, tiny_ckpt, capsys):
    outside, src = tmp_path / "outside", tmp_path / "src"
    outside.mkdir()
    (outside / "keep.jsonl").write_text("precious\n")
    src.mkdir()
    picture(6).save(src / "a.png")
    args = [str(src), "--task", "detect", "--object", OBJECT, "--weights", str(tiny_ckpt), "--max-objects", "2",
            "--quiet"]
    out1 = tmp_path / "out1"
    out1.mkdir()
    os.symlink(outside, out1 / "annotated")  # drawings would land outside
    before = snapshot(outside)
    assert batch_main([*args, "--out", str(out1), "--draw"]) == 0
    capsys.readouterr()
    assert snapshot(outside) == before
    (rec,) = [json.loads(line) for line in (out1 / "results.jsonl").read_text().splitlines()]
    assert "result" in rec and "refusing to write" in rec["draw_error"]

    out2 = tmp_path / "out2"
    out2.mkdir()
    os.symlink(outside / "keep.jsonl", out2 / "results.jsonl")  # records would be appended outside
    assert batch_main([*args, "--out", str(out2)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert snapshot(outside) == before

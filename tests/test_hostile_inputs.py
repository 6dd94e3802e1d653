"""Hostile input through the Engine API, the CLI (`python -m engine detect`) and `app.batch`.

The image corpus comes from tests/malformed.py (generated here, never checked in): the Engine API
and app.batch take all of it, the CLI one item per kind in-process plus a few real subprocesses.
Every bad item must give one clear line (never a traceback), and a good request right after the
bad ones must still be served. Hostile prompts and max_objects values get a clear error or a
documented bound (README "Limits and errors").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.batch import main as batch_main
from engine.__main__ import main as cli_main
from engine.serving.engine import Engine
from engine.model.image import ImageError, load_image
from engine.serving.errors import RequestError
from engine.serving.limits import MAX_OBJECT_CHARS, MAX_OBJECT_TOKENS, MAX_OBJECTS_LIMIT

from .conftest import torch_threads
from .malformed import KINDS_NOT_REGULAR, generate, sample

ROOT = Path(__file__).resolve().parents[1]
OBJECT = "red circle"
REQUIRED_KINDS = {"truncated-png", "truncated-jpeg", "truncated-webp", "truncated-gif", "zero-byte", "random-bytes",
                  "bomb-header", "bomb-zlib", "tiny", "extreme-aspect", "cmyk", "16-bit", "palette", "alpha",
                  "exif-rotated", "animated", "text", "svg", "html", "unreadable", "dir-named-image", "fifo",
                  "dangling-symlink", "symlink-loop"}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed") / "corpus"
    return root, generate(root)


@pytest.fixture(scope="module")
def good_png(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("good") / "good.png"
    rng = np.random.default_rng(5)
    Image.fromarray((rng.random((90, 120, 3)) * 255).astype(np.uint8)).save(path)
    return path


def assert_one_line(message: str, *fragments: str) -> None:
    assert message and "\n" not in message and "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_corpus_is_large_and_covers_every_kind(corpus):
    root, items = corpus
    assert len(items) >= 200
    assert len({i.name for i in items}) == len(items)
    assert REQUIRED_KINDS <= {i.kind for i in items}
    for item in items:  # every entry exists (as something) and carries an image suffix
        assert os.path.lexists(root / item.name), item
        assert Path(item.name).suffix.lower() in {".png", ".jpg", ".jpeg", ".gif", ".webp", ".tif", ".tiff", ".bmp"}
    trunc = [i for i in items if i.kind.startswith("truncated-") and not i.kind.endswith("trailer")]
    assert len(trunc) >= 100  # many offsets per format


def test_loader_on_the_whole_corpus(corpus):
    """load_image: an ImageError naming the file for every bad item; ok items decode correctly
    (EXIF orientation honoured, first frame of animations, alpha on white, 16-bit scaled)."""
    root, items = corpus
    for item in items:
        path = root / item.name
        try:
            image = load_image(path)
        except ImageError as e:
            assert item.expect in ("error", "either"), f"{item}: {e}"
            assert_one_line(str(e), item.name, "cannot read image")
            continue
        assert item.expect in ("ok", "either"), f"{item} loaded as {image.size}"
        assert image.mode == "RGB"
        if item.size is not None:
            assert image.size == tuple(item.size), item
        if item.pixel is not None:
            (x, y), rgb = item.pixel
            got = np.asarray(image)[y, x].astype(int)
            assert np.abs(got - np.array(rgb)).max() <= 40, (item, got.tolist())
    # orientation: the red left half of the stored image ends up where EXIF says
    red_at = {1: (2, 10), 2: (37, 10), 3: (37, 10), 4: (2, 10), 5: (10, 2), 6: (10, 2), 7: (10, 37), 8: (10, 37)}
    for orientation, (x, y) in red_at.items():
        px = np.asarray(load_image(root / f"exif_orientation_{orientation}.jpg"))[y, x].astype(int)
        assert px[0] > 180 and px[2] < 80, (orientation, px.tolist())


def test_engine_api_on_the_whole_corpus(corpus, tiny_ckpt, good_png):
    """Paths and raw bytes; bad items fail alone in submit, good ones complete, the engine keeps
    serving (a good request every 20 items) and every pool is back to idle at the end."""
    root, items = corpus
    engine = Engine.from_pretrained(tiny_ckpt, max_batch=8).start()
    try:
        baseline = engine.pools()
        handles = []
        for n, item in enumerate(items):
            path = root / item.name
            sources = [("path", str(path))]
            if item.expect != "ok" and path.is_file() and not path.is_symlink() and os.access(path, os.R_OK):
                sources.append(("bytes", path.read_bytes()))
            for how, source in sources:
                try:
                    handle = engine.submit(source, "detect", OBJECT, max_objects=3)
                except ImageError as e:
                    assert item.expect in ("error", "either"), f"{item} ({how}): {e}"
                    assert_one_line(str(e), "cannot read image", item.name if how == "path" else "<bytes>")
                    continue
                assert item.expect in ("ok", "either"), f"{item} ({how}) was accepted"
                handles.append(handle)
            if n % 20 == 19:  # still serving after the bad ones
                assert "objects" in engine.detect(str(good_png), OBJECT, max_objects=2, timeout=60)
        assert len(handles) >= sum(i.expect == "ok" for i in items)
        for handle in handles:
            result = handle.result(timeout=120)
            assert isinstance(result["objects"], list) and len(result["objects"]) <= 3
        assert "objects" in engine.detect(str(good_png), OBJECT, max_objects=2, timeout=60)
    finally:
        engine.close()
    after = engine.pools()
    assert {k: v for k, v in after.items() if k != "prefix_cache"} == \
        {k: v for k, v in baseline.items() if k != "prefix_cache"}


def run_cli_inprocess(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli_main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_on_one_item_per_kind(corpus, tiny_ckpt, good_png, capsys):
    """`python -m engine detect` (engine.__main__.main in-process): one item of every kind."""
    root, items = corpus
    picked = sample(items)
    assert len(picked) >= 20
    for item in picked:
        rc, out, err = run_cli_inprocess(capsys, "detect", str(root / item.name), OBJECT, "--weights", str(tiny_ckpt),
                                         "--max-objects", "2")
        if rc == 0:
            assert item.expect in ("ok", "either"), (item, out, err)
            assert "objects" in json.loads(out)
        else:
            assert item.expect in ("error", "either"), (item, rc, err)
            assert rc == 2 and out == ""
            assert err.startswith("error: cannot read image") and err.count("\n") == 1, err
            assert_one_line(err.strip(), item.name)
    rc, out, _ = run_cli_inprocess(capsys, "detect", str(good_png), OBJECT, "--weights", str(tiny_ckpt),
                                   "--max-objects", "2")
    assert rc == 0 and "objects" in json.loads(out)


def test_cli_subprocess_on_special_files(corpus, tiny_ckpt):
    """Real processes, as a user runs them: a FIFO (must not block) and a decompression bomb."""
    root, _ = corpus
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    names = [n for n in ("pipe.jpg", "bomb_zlib_1bit.png") if os.path.lexists(root / n)]

    def one(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "engine", "detect", str(root / name), OBJECT, "--weights",
                               str(tiny_ckpt), "--max-objects", "2"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=90)

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(names, pool.map(one, names)))
    for name, r in runs.items():
        assert r.returncode == 2 and r.stdout == "", (name, r)
        assert "Traceback" not in r.stderr, (name, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1 and name in lines[0], (name, r.stderr)


def test_batch_on_the_whole_corpus(corpus, tiny_ckpt, good_png, tmp_path, capsys):
    """app.batch: one record per entry with an image name (folders are folders, not images),
    an error record with one clear line for every bad one, results for the good ones."""
    root, items = corpus
    out = tmp_path / "out"
    rc = batch_main([str(root), "--task", "detect", "--object", OBJECT, "--out", str(out), "--weights",
                     str(tiny_ckpt), "--max-objects", "2", "--quiet", "--window", "16", "--max-batch", "8"])
    stdout, stderr = capsys.readouterr()
    assert rc == 1, stdout + stderr  # some images failed: exit status 1, not a crash
    assert "Traceback" not in stdout + stderr
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    by_path = {r["path"]: r for r in records}
    assert len(by_path) == len(records)  # exactly one record each
    expected = {i.name for i in items if i.kind != "dir-named-image"}
    assert set(by_path) == expected
    for item in items:
        if item.name not in by_path:
            continue
        rec = by_path[item.name]
        if item.expect == "ok":
            assert "result" in rec and (rec["width"], rec["height"]) == tuple(item.size), rec
        elif item.expect == "error":
            assert "error" in rec and rec["width"] is None, rec
            assert_one_line(rec["error"], "cannot read image")
    failures = sum("error" in r for r in records)
    assert f"failures: {failures}" in stdout
    coco = json.loads((out / "coco.json").read_text())
    assert sorted(i["file_name"] for i in coco["images"]) == sorted(p for p, r in by_path.items() if "result" in r)
    for kind in KINDS_NOT_REGULAR[1:]:  # FIFO, broken links, loops: recorded as errors, never opened for reading
        assert any(by_path[i.name].get("error") for i in items if i.kind == kind)
    # the same tool keeps working on a good folder
    good_dir = tmp_path / "good"
    good_dir.mkdir()
    (good_dir / "a.png").write_bytes(good_png.read_bytes())
    rc = batch_main([str(good_dir), "--task", "point", "--object", OBJECT, "--out", str(tmp_path / "good-out"),
                     "--weights", str(tiny_ckpt), "--max-objects", "2", "--quiet"])
    capsys.readouterr()
    assert rc == 0


# ---- hostile prompts and options -------------------------------------------------------------

HOSTILE_OBJECTS = {
    "empty": ("", "empty"),
    "whitespace": (" \t\n\u3000 ", "empty"),
    "controls only": ("\x00\x01\x07\x1b\x7f", "empty"),
    "10k chars": ("x" * 10_000, f"limit is {MAX_OBJECT_CHARS}"),
    "201 chars": ("y" * (MAX_OBJECT_CHARS + 1), f"limit is {MAX_OBJECT_CHARS}"),
    "too many tokens": ("🦄" * 40, f"limit is {MAX_OBJECT_TOKENS}"),
    "zero-width only": ("\u200b\u200c\u200d\ufeff", "empty"),
    "lone surrogates": ("\ud800\udfff", "empty"),
    "not text": (b"red", "must be text"),
}
ACCEPTED_OBJECTS = {  # odd but valid: cleaned (invisible/control characters dropped), then searched
    "control chars inside": ("red\x00circle\x1b", "red circle"),
    "rtl": ("עיגול אדום", "עיגול אדום"),
    "bidi override": ("\u202ered circle\u202c", "red circle"),
    "zero-width inside": ("red\u200b circle", "red circle"),
    "emoji": ("🔴 circle", "🔴 circle"),
    "combining marks": ("cafe\u0301 e\u0300", "cafe\u0301 e\u0300"),
    "surrogate inside": ("red\ud83d circle", "red circle"),
}
HOSTILE_MAX_OBJECTS = [0, -1, -(2**63), MAX_OBJECTS_LIMIT + 1, 10**12, 2**200, "many", "5", 2.5, float("nan"),
                       float("inf"), None, True, [3]]


def test_hostile_prompts_through_the_engine(tiny_ckpt, good_png):
    engine = Engine.from_pretrained(tiny_ckpt, max_batch=4).start()
    try:
        for name, (obj, message) in HOSTILE_OBJECTS.items():
            with pytest.raises(RequestError) as info:
                engine.submit(str(good_png), "detect", obj, max_objects=2)
            assert_one_line(str(info.value), message)
        for value in HOSTILE_MAX_OBJECTS:
            with pytest.raises(RequestError, match="max_objects") as info:
                engine.submit(str(good_png), "point", OBJECT, max_objects=value)
            assert_one_line(str(info.value))
        for name, (obj, _) in ACCEPTED_OBJECTS.items():
            assert "points" in engine.point(str(good_png), obj, max_objects=2, timeout=60), name
        assert "objects" in engine.detect(str(good_png), OBJECT, max_objects=2, timeout=60)
    finally:
        engine.close()


def test_hostile_prompts_through_the_cli(tiny_ckpt, good_png, capsys):
    base = [str(good_png)]
    weights = ["--weights", str(tiny_ckpt)]
    for obj, message in [("", "empty"), ("x" * 10_000, "limit is"), ("🦄" * 40, "tokens"), ("\x01\x02", "empty")]:
        rc, out, err = run_cli_inprocess(capsys, "detect", *base, obj, *weights)
        assert rc == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err
        assert message in err
    for value in ["0", "-1", str(MAX_OBJECTS_LIMIT + 1), str(10**30)]:
        rc, out, err = run_cli_inprocess(capsys, "point", *base, OBJECT, *weights, "--max-objects", value)
        assert rc == 2 and "max_objects must be between 1 and" in err and "Traceback" not in err
    for value in ["many", "2.5", "nan", ""]:  # argparse: usage line + one error line, exit 2
        with pytest.raises(SystemExit) as info:
            cli_main(["point", *base, OBJECT, *weights, "--max-objects", value])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "invalid int value" in err and "Traceback" not in err
    rc, out, _ = run_cli_inprocess(capsys, "point", *base, "red\u200b circle \u202e", *weights, "--max-objects", "2")
    assert rc == 0 and "points" in json.loads(out)


def test_hostile_prompts_through_batch(tiny_ckpt, good_png, tmp_path, capsys):
    src = tmp_path / "imgs"
    src.mkdir()
    (src / "a.png").write_bytes(good_png.read_bytes())
    base = [str(src), "--task", "detect", "--weights", str(tiny_ckpt), "--quiet"]
    for obj, message in [("", "empty"), ("   ", "empty"), ("x" * 10_000, "limit is"), ("🦄" * 40, "tokens"),
                         ("\x01\x02", "empty")]:
        assert batch_main([*base, "--object", obj, "--out", str(tmp_path / "o1")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err, err
        assert not (tmp_path / "o1").exists()  # refused before anything is written
    for value in ["0", "-1", str(MAX_OBJECTS_LIMIT + 1), str(10**30)]:
        assert batch_main([*base, "--object", OBJECT, "--max-objects", value, "--out", str(tmp_path / "o2")]) == 2
        assert "between 1 and" in capsys.readouterr().err
    for value in ["many", "2.5", ""]:
        with pytest.raises(SystemExit) as info:
            batch_main([*base, "--object", OBJECT, "--max-objects", value])
        assert info.value.code == 2
        assert "invalid int value" in capsys.readouterr().err
    out = tmp_path / "o3"
    assert batch_main([*base, "--object", "red\u200b circle\x00", "--max-objects", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rec["object"] == "red circle" and "result" in rec  # the cleaned text is what is recorded

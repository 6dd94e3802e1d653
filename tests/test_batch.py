"""python -m app.batch: a folder with a corrupt file, interrupted runs and resumes, COCO output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from app.batch import main
from app.job import Journal, UsageError, default_out, find_images
from app.common import open_engine
from app.draw import draw_result
from engine.model.image import load_image
from tests import batch_child
from tests.conftest import make_checkpoint

ROOT = Path(__file__).resolve().parent.parent
OBJECT = "red circle"


def picture(i: int) -> Image.Image:
    rng = np.random.default_rng(i)
    w, h = int(rng.integers(64, 300)), int(rng.integers(64, 300))
    im = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(0, 256, 3)))
    d = ImageDraw.Draw(im)
    x, y = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
    d.ellipse((x, y, x + w // 3, y + h // 3), fill=(225, 30, 35))
    return im


def make_folder(root: Path, n: int, *, broken: bool = True) -> list[str]:
    """n images (png/jpg, every fourth in sub/), plus junk; returns the expected relative paths."""
    (root / "sub").mkdir(parents=True)
    names = []
    for i in range(n):
        rel = f"{'sub/' if i % 4 == 3 else ''}img{i:03d}.{'jpg' if i % 2 else 'png'}"
        picture(i).save(root / rel)
        names.append(rel)
    (root / "notes.txt").write_text("not an image, ignored")
    picture(99).save(root / ".hidden.png")
    if broken:
        (root / "corrupt.JPG").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
        (root / "empty.png").write_bytes(b"")
        names += ["corrupt.JPG", "empty.png"]
    return sorted(names)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A tiny random checkpoint that finds objects in the test pictures (so COCO has annotations)."""
    tmp = tmp_path_factory.mktemp("ckpt")
    for seed in range(12):
        path = make_checkpoint(tmp / f"tiny{seed}", seed)
        engine = open_engine(path, max_batch=1)
        if sum(len(engine.detect(picture(i), OBJECT, max_objects=8)["objects"]) > 0 for i in range(4)) >= 2:
            return path
    pytest.fail("no tiny random checkpoint (seeds 0-11) finds objects; COCO output cannot be checked")


def run_batch(args: list[str], capsys) -> tuple[int, str]:
    rc = main(args)
    return rc, capsys.readouterr().out


def check_coco(path: Path, records: list[dict], task: str) -> COCO:
    coco = COCO(str(path))
    ok = [r for r in records if "result" in r]
    assert sorted(img["file_name"] for img in coco.dataset["images"]) == sorted(r["path"] for r in ok)
    key = "objects" if task == "detect" else "points"
    assert len(coco.getAnnIds()) == sum(len(r["result"][key]) for r in ok) > 0
    assert coco.dataset["categories"] == [
        {"id": 1, "name": OBJECT, "supercategory": "object", **({"keypoints": ["point"], "skeleton": []}
                                                                if task == "point" else {})}]
    for rec in ok:  # pixels, not normalised
        img = next(i for i in coco.dataset["images"] if i["file_name"] == rec["path"])
        assert (img["width"], img["height"]) == (rec["width"], rec["height"])
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[img["id"]]))
        for ann, obj in zip(anns, rec["result"][key]):
            if task == "detect":
                x, y, w, h = ann["bbox"]
                assert x == pytest.approx(obj["x_min"] * rec["width"], abs=0.01)
                assert y + h == pytest.approx(obj["y_max"] * rec["height"], abs=0.02)
                assert ann["area"] == pytest.approx(w * h, abs=0.05)
            else:
                assert ann["keypoints"][:2] == pytest.approx([obj["x"] * rec["width"], obj["y"] * rec["height"]],
                                                             abs=0.01)
                assert ann["num_keypoints"] == 1 and ann["keypoints"][2] == 2
    # Evaluable: the file's own annotations, as detections against themselves.
    dets = coco.loadRes([{k: v for k, v in a.items() if k != "id"} for a in coco.dataset["annotations"]])
    ev = COCOeval(coco, dets, "bbox" if task == "detect" else "keypoints")
    if task == "point":
        ev.params.kpt_oks_sigmas = np.array([0.05])
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    if task == "point" or all(a["area"] > 0 for a in coco.dataset["annotations"]):
        assert ev.stats[0] > 0.99
    return coco


def test_full_run_corrupt_files_coco_and_drawings(tmp_path, weights, capsys):
    src, out = tmp_path / "photos", tmp_path / "result"
    expected = make_folder(src, 10)
    before = tree(src)
    rc, text = run_batch([str(src), "--task", "detect", "--object", OBJECT, "--out", str(out), "--recursive",
                          "--draw", "--weights", str(weights), "--max-objects", "8", "--quiet"], capsys)
    assert rc == 1  # two images failed
    assert tree(src) == before  # nothing written into DIR
    assert sorted(p.name for p in out.iterdir()) == ["annotated", "coco.json", "results.jsonl"]
    records = read_jsonl(out / "results.jsonl")
    assert sorted(r["path"] for r in records) == expected
    by_path = {r["path"]: r for r in records}
    for bad in ("corrupt.JPG", "empty.png"):
        assert "result" not in by_path[bad] and by_path[bad]["width"] is None
        assert "cannot read image" in by_path[bad]["error"]
    assert "empty" in by_path["empty.png"]["error"]
    for rec in records:
        assert (rec["task"], rec["object"], rec["max_objects"]) == ("detect", OBJECT, 8)
        if "result" in rec:
            im = load_image(src / rec["path"])
            assert (rec["width"], rec["height"]) == im.size
            drawn = Image.open(out / "annotated" / rec["path"])
            assert drawn.size == im.size
            if rec["path"].endswith(".png"):  # lossless: exactly what draw_result makes
                assert drawn.convert("RGB").tobytes() == draw_result(im, rec["result"], OBJECT).tobytes()
    assert sorted(p.relative_to(out / "annotated").as_posix() for p in (out / "annotated").rglob("*")
                  if p.is_file()) == [p for p in expected if p not in ("corrupt.JPG", "empty.png")]
    n_objects = sum(len(r["result"]["objects"]) for r in records if "result" in r)
    assert f"images: 12 in {src} (12 new, 0 already recorded)" in text
    assert f"objects: {n_objects} " in text and "failures: 2" in text and "images/s" in text
    assert "corrupt.JPG: cannot read image" in text
    check_coco(out / "coco.json", records, "detect")

    # A re-run has nothing to do, loses and duplicates nothing, and still reports the failures.
    rc, text = run_batch([str(src), "--task", "detect", "--object", OBJECT, "--out", str(out), "--recursive",
                          "--weights", str(weights), "--quiet"], capsys)
    assert rc == 1 and "(0 new, 12 already recorded)" in text
    assert read_jsonl(out / "results.jsonl") == records

    # --draw on a re-run redraws a missing annotated image from its record (no new record).
    redrawn = out / "annotated" / "img000.png"
    first = redrawn.read_bytes()
    redrawn.unlink()
    rc, text = run_batch([str(src), "--task", "detect", "--object", OBJECT, "--out", str(out), "--recursive",
                          "--draw", "--weights", str(weights), "--quiet"], capsys)
    assert rc == 1 and redrawn.read_bytes() == first
    assert read_jsonl(out / "results.jsonl") == records

    # Fix one file, retry the errors: the newest record of a path wins.
    picture(7).save(src / "corrupt.JPG", format="JPEG")
    (src / "empty.png").unlink()
    rc, text = run_batch([str(src), "--task", "detect", "--object", OBJECT, "--out", str(out), "--recursive",
                          "--weights", str(weights), "--retry-errors", "--quiet"], capsys)
    assert rc == 0, text
    assert "(1 new, 10 already recorded)" in text and "failures: 0" in text
    latest = {r["path"]: r for r in read_jsonl(out / "results.jsonl")}
    assert "result" in latest["corrupt.JPG"]
    coco = COCO(str(out / "coco.json"))
    assert len(coco.dataset["images"]) == 11  # empty.png is gone from DIR, so from the COCO file


def test_interrupted_runs_resume_without_loss_or_duplicates(tmp_path, weights):
    src, out = tmp_path / "many", tmp_path / "many-out"
    expected = make_folder(src, 60, broken=False)
    jsonl = out / "results.jsonl"
    cmd = [sys.executable, "-m", "app.batch", str(src), "--task", "point", "--object", OBJECT, "--out", str(out),
           "--recursive", "--weights", str(weights), "--max-objects", "8", "--quiet"]

    # 1. --limit: stops after 5 images, exit 0, the rest left for later.
    r = subprocess.run(cmd + ["--limit", "5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "55 left for a later run" in r.stdout
    assert len(read_jsonl(jsonl)) == 5

    def start_paused(new_records: int) -> subprocess.Popen:
        """The run, stopped right after its `new_records`-th new record is on disk."""
        return batch_child.start(new_records, cmd[3:] + ["--window", "1", "--max-batch", "1"], cwd=ROOT,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})

    # 2. Ctrl-C after 3 new records: the images in flight are finished and recorded, coco.json written, exit 130.
    proc = start_paused(3)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    stdout, stderr = proc.communicate(timeout=300)  # a backstop against a hang, not a speed check
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    done = read_jsonl(jsonl)
    assert 8 <= len(done) < 60 and len({r["path"] for r in done}) == len(done)
    assert len(COCO(str(out / "coco.json")).dataset["images"]) == len(done)

    # 3. SIGKILL mid-run, then a torn line as a crash in the middle of a write would leave.
    proc = start_paused(3)
    proc.kill()
    proc.wait(timeout=30)
    kept = jsonl.read_bytes()
    assert kept.endswith(b"\n")
    with open(jsonl, "ab") as f:
        f.write(b'{"path": "img059.jpg", "width": 12')
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cut a torn last line" in r.stderr
    final = jsonl.read_bytes()
    assert final.startswith(kept)  # nothing written before the crash was lost or rewritten
    records = read_jsonl(jsonl)
    assert sorted(rec["path"] for rec in records) == expected  # every image exactly once
    assert all("result" in rec for rec in records)
    check_coco(out / "coco.json", records, "point")


def test_journal_repairs_only_a_torn_tail(tmp_path):
    path = tmp_path / "results.jsonl"
    good = [{"path": f"{i}.png", "result": {"points": []}} for i in range(3)]
    body = "".join(json.dumps(r) + "\n" for r in good).encode()

    for tail, kept_records in [(b'{"path": "3.pn', 3), (b"\x00\x00\x00\x00", 3), (b"garbage\n\n", 3),
                               (json.dumps({"path": "3.png", "error": "x"}).encode(), 4), (b"", 3)]:
        path.write_bytes(body + tail)
        j = Journal(path)
        try:
            assert len(j.load()) == kept_records
            j.append({"path": "new.png", "error": "e"})
        finally:
            j.close()
        lines = path.read_bytes().splitlines()
        assert all(json.loads(line) for line in lines) and len(lines) == kept_records + 1

    path.write_bytes(body[:10] + b"\n" + body)  # damage before good lines: refuse, change nothing
    j = Journal(path)
    try:
        with pytest.raises(UsageError, match="line 1"):
            j.load()
    finally:
        j.close()
    assert path.read_bytes() == body[:10] + b"\n" + body


def test_usage_errors_exit_2(tmp_path, weights, capsys):
    src = tmp_path / "imgs"
    make_folder(src, 2, broken=False)
    base = ["--task", "detect", "--object", OBJECT, "--weights", str(weights), "--quiet"]
    assert main([str(tmp_path / "missing"), *base]) == 2
    assert main([str(src), "--task", "detect", "--object", "  ", "--quiet"]) == 2
    assert main([str(src), *base, "--max-objects", "0"]) == 2
    assert "between 1 and" in capsys.readouterr().err
    (tmp_path / "nothing").mkdir()
    assert main([str(tmp_path / "nothing"), *base]) == 2
    assert "no images found" in capsys.readouterr().err
    assert main([str(src), *base, "--weights", str(tmp_path / "no-weights")]) == 2
    assert "cannot load the model" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main([str(src), *base, "--out", str(out)]) == 0
    assert main([str(src), *base[:3], "cat", *base[4:], "--out", str(out)]) == 2  # OUT holds another object
    assert "holds results for detect 'red circle'" in capsys.readouterr().err
    for bad in (["--task", "segment", "--object", "x"], ["--object", "x"], ["--task", "detect", "--object", "x",
                                                                           "--window", "0"]):
        with pytest.raises(SystemExit) as info:
            main([str(src), *bad])
        assert info.value.code == 2
    r = subprocess.run([sys.executable, "-m", "app.batch", str(tmp_path / "missing"), *base], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_default_out_and_scan(tmp_path, weights, capsys):
    src = tmp_path / "photos"
    expected = make_folder(src, 4, broken=False)
    assert default_out(src) == tmp_path / "photos-annotations"
    assert find_images(src, recursive=False) == [p for p in expected if "/" not in p]
    inner = src / "sub" / "out"  # an OUT inside DIR is never scanned, even with --recursive
    rc, _ = run_batch([str(src), "--task", "detect", "--object", OBJECT, "--recursive", "--draw", "--out",
                       str(inner), "--weights", str(weights), "--quiet"], capsys)
    assert rc == 0
    assert find_images(src, recursive=True, exclude=inner) == expected
    rc, text = run_batch([str(src), "--task", "detect", "--object", OBJECT, "--weights", str(weights), "--quiet"],
                         capsys)
    assert rc == 0 and (tmp_path / "photos-annotations" / "results.jsonl").is_file()
    assert "(3 new, 0 already recorded)" in text


def test_unusual_file_names(tmp_path, weights, capsys):
    src, out = tmp_path / "names", tmp_path / "names-out"
    src.mkdir()
    names = ["café ☕.png", "with space.jpg", os.fsdecode(b"latin1-\xe9.png")]
    for i, name in enumerate(names):
        picture(i).save(src / name)
    (src / os.fsdecode(b"broken-\xff.png")).write_bytes(b"nope")
    rc, text = run_batch([str(src), "--task", "point", "--object", OBJECT, "--out", str(out), "--draw",
                       "--weights", str(weights), "--quiet"], capsys)
    assert rc == 1 and "broken-\\udcff.png: cannot read image" in text
    names.append(os.fsdecode(b"broken-\xff.png"))
    assert sorted(r["path"] for r in read_jsonl(out / "results.jsonl")) == sorted(names)
    assert sorted(p.name for p in (out / "annotated").iterdir()) == sorted(names[:3])
    COCO(str(out / "coco.json"))
    rc, text = run_batch([str(src), "--task", "point", "--object", OBJECT, "--out", str(out),
                          "--weights", str(weights), "--quiet"], capsys)
    assert rc == 1 and "(0 new, 4 already recorded)" in text

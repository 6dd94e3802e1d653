"""app.batch for a user who trains on its output: several classes per run, scores and
--min-score, YOLO export, inputs beyond one folder, the ms/queue split, file modes, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest
import yaml
from pycocotools.coco import COCO

import app.batch as batch
from app.batch import main
from app.yolo import read_labels
from tests.test_batch import OBJECT, make_folder, read_jsonl, weights  # noqa: F401 - fixture

CLASSES = (OBJECT, "blue square")


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_several_classes_make_one_multiclass_coco_and_a_yolo_export(tmp_path, weights, capsys):
    src, out = tmp_path / "photos", tmp_path / "out"
    names = make_folder(src, 6, broken=False)
    rc, stdout, _ = run(capsys, src, "--task", "detect", "--object", CLASSES[0], "--object", CLASSES[1],
                        "--format", "coco,yolo", "--out", out, "--weights", weights, "--recursive", "--quiet")
    assert rc == 0, stdout
    records = read_jsonl(out / "results.jsonl")
    assert sorted(r["path"] for r in records) == names  # one line per image, every class in it
    found = [o for r in records for o in r["result"]["objects"]]
    assert all(r["object"] == list(CLASSES) for r in records)
    assert found and {o["label"] for o in found} <= set(CLASSES)
    assert all(0.0 <= o["score"] <= 1.0 for o in found)

    coco = COCO(str(out / "coco.json"))
    assert coco.loadCats(coco.getCatIds()) == [{"id": 1, "name": CLASSES[0], "supercategory": "object"},
                                               {"id": 2, "name": CLASSES[1], "supercategory": "object"}]
    assert len(coco.getAnnIds()) == len(found)
    by_file = {img["file_name"]: img["id"] for img in coco.dataset["images"]}

    data = yaml.safe_load((out / "data.yaml").read_text())
    assert data["names"] == {0: CLASSES[0], 1: CLASSES[1]} and data["nc"] == 2
    assert Path(data["path"]) == out.absolute() and data["train"] == data["val"] == "images"
    for rec in records:
        rel = Path(rec["path"])
        assert (out / "images" / rel).resolve() == (src / rel).resolve()  # the trainer finds the image
        rows = read_labels(out / "labels" / rel.with_suffix(".txt"))
        anns = coco.loadAnns(coco.getAnnIds(imgIds=by_file[rec["path"]]))
        assert len(rows) == len(anns) == len(rec["result"]["objects"])
        w, h = rec["width"], rec["height"]
        for (cls, cx, cy, bw, bh), ann in zip(rows, anns):  # YOLO round-trips to the COCO box (± 1 px)
            assert cls + 1 == ann["category_id"]
            x, y, aw, ah = ann["bbox"]
            assert abs((cx - bw / 2) * w - x) <= 1 and abs((cy - bh / 2) * h - y) <= 1
            assert abs(bw * w - aw) <= 1 and abs(bh * h - ah) <= 1

    # Resume: nothing new to do, the same exports again.
    before = (out / "coco.json").read_text()
    rc, stdout, _ = run(capsys, src, "--task", "detect", "--object", CLASSES[0], "--object", CLASSES[1],
                        "--format", "coco,yolo", "--out", out, "--weights", weights, "--recursive", "--quiet")
    assert rc == 0 and "0 new" in stdout and (out / "coco.json").read_text() == before
    # Other classes in the same OUT are refused.
    rc, _, err = run(capsys, src, "--task", "detect", "--object", CLASSES[0], "--out", out, "--weights", weights)
    assert rc == 2 and "choose another --out" in err


def test_objects_file_and_min_score(tmp_path, weights, capsys):
    src, out = tmp_path / "photos", tmp_path / "out"
    make_folder(src, 4, broken=False)
    classes = tmp_path / "classes.txt"
    classes.write_text(f"# what to find\n{CLASSES[0]}\n\n{CLASSES[1]}\n")
    rc, _, _ = run(capsys, src, "--task", "detect", "--objects-file", classes, "--out", out, "--weights", weights,
                   "--quiet")
    assert rc == 0
    first = read_jsonl(out / "results.jsonl")
    found = [o for r in first for o in r["result"]["objects"]]
    scores = sorted(o["score"] for o in found)
    cut = scores[len(scores) // 2]
    rc, stdout, _ = run(capsys, src, "--task", "detect", "--objects-file", classes, "--out", out, "--weights", weights,
                        "--min-score", cut, "--quiet")
    assert rc == 0 and f"score >= {cut:g}" in stdout
    anns = json.loads((out / "coco.json").read_text())["annotations"]
    assert sorted(a["score"] for a in anns) == [s for s in scores if s >= cut]
    assert read_jsonl(out / "results.jsonl") == first  # the journal keeps everything, nothing re-inferred
    rc, _, err = run(capsys, src, "--task", "detect", "--object", OBJECT, "--object", OBJECT, "--out", tmp_path / "x",
                     "--weights", weights)
    assert rc == 2 and "given twice" in err


def test_yolo_is_refused_for_points(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), "--task", "point", "--object", OBJECT, "--format", "coco,yolo"])
    assert e.value.code == 2 and "--task detect" in capsys.readouterr().err


def test_inputs_a_file_several_files_and_folders_and_a_list(tmp_path, weights, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    names_a, names_b = make_folder(a, 3, broken=False), make_folder(b, 2, broken=False)
    common = ["--task", "point", "--object", OBJECT, "--weights", weights, "--quiet"]

    rc, _, _ = run(capsys, a / names_a[0], "--out", tmp_path / "one", *common)
    assert rc == 0 and [r["path"] for r in read_jsonl(tmp_path / "one" / "results.jsonl")] == [names_a[0]]

    rc, _, _ = run(capsys, a / names_a[0], b, "--out", tmp_path / "two", "--recursive", *common)
    assert rc == 0
    assert sorted(r["path"] for r in read_jsonl(tmp_path / "two" / "results.jsonl")) == \
        sorted([f"a/{names_a[0]}"] + [f"b/{n}" for n in names_b])

    listing = tmp_path / "todo.txt"
    listing.write_text(f"# images to label\na/{names_a[1]}\n{b / names_b[0]}\n\na/missing.png\n")
    rc, stdout, _ = run(capsys, listing, "--out", tmp_path / "three", *common)
    recs = {r["path"]: r for r in read_jsonl(tmp_path / "three" / "results.jsonl")}
    assert rc == 1 and sorted(recs) == sorted([f"a/{names_a[1]}", f"b/{names_b[0]}", "a/missing.png"])
    assert "error" in recs["a/missing.png"] and "result" in recs[f"b/{names_b[0]}"]

    rc, _, err = run(capsys, tmp_path / "nope.png", *common)
    assert rc == 2 and "does not exist" in err and "Traceback" not in err
    (tmp_path / "notes.md").write_text("x")
    rc, _, err = run(capsys, tmp_path / "notes.md", *common)
    assert rc == 2 and "neither a folder, an image" in err


def test_ms_is_service_time_and_queue_wait_is_separate(tmp_path, weights, capsys):
    src, out = tmp_path / "photos", tmp_path / "out"
    make_folder(src, 6, broken=False)
    rc, _, _ = run(capsys, src, "--task", "point", "--object", OBJECT, "--out", out, "--weights", weights,
                   "--max-batch", "1", "--window", "6", "--recursive", "--quiet")
    assert rc == 0
    records = read_jsonl(out / "results.jsonl")
    assert all(r["ms"] >= 0 and r["queue_ms"] >= 0 for r in records)
    # One KV row, six images in flight: all but the first waited for the row, and that wait is
    # not service time (before the split, "ms" counted it).
    waited = sorted(records, key=lambda r: r["queue_ms"])[-1]
    assert waited["queue_ms"] >= max(r["ms"] for r in records if r is not waited)


def test_outputs_follow_the_umask(tmp_path, weights, capsys):
    src, out = tmp_path / "photos", tmp_path / "out"
    make_folder(src, 2, broken=False)
    previous = os.umask(0o027)
    try:
        rc, _, _ = run(capsys, src, "--task", "detect", "--object", OBJECT, "--out", out, "--weights", weights,
                       "--format", "coco,yolo", "--draw", "--quiet")
    finally:
        os.umask(previous)
    assert rc == 0
    files = [out / "results.jsonl", out / "coco.json", out / "data.yaml", *(out / "labels").iterdir(),
             *(out / "annotated").iterdir()]
    assert {oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {oct(0o640)}


def interrupt_after_first_record(monkeypatch, times: int) -> None:
    """Ctrl-C (`times` SIGINTs to this process, handled in the main thread) as the first new
    record is committed."""
    real = batch.commit
    sent = []

    def commit(*args, **kwargs):
        failed = real(*args, **kwargs)
        if not sent:
            sent.append(True)
            for _ in range(times):
                signal.raise_signal(signal.SIGINT)
        return failed

    monkeypatch.setattr(batch, "commit", commit)


def test_one_ctrl_c_cancels_the_queued_images(tmp_path, weights, capsys, monkeypatch):
    src, out = tmp_path / "photos", tmp_path / "out"
    names = make_folder(src, 12, broken=False)
    args = [src, "--task", "point", "--object", OBJECT, "--out", out, "--weights", weights, "--max-batch", "1",
            "--window", "64", "--recursive", "--quiet"]
    interrupt_after_first_record(monkeypatch, 1)
    rc, _, err = run(capsys, *args)
    assert rc == 130 and "interrupted" in err
    done = read_jsonl(out / "results.jsonl")
    assert 1 <= len(done) <= 4  # the first and those already decoding; the queued ones were cancelled
    assert all("result" in r for r in done)  # cancelled images are not recorded as failures
    assert len(COCO(str(out / "coco.json")).dataset["images"]) == len(done)
    monkeypatch.undo()
    rc, _, _ = run(capsys, *args)
    assert rc == 0 and sorted(r["path"] for r in read_jsonl(out / "results.jsonl")) == names


def test_second_ctrl_c_aborts_with_a_valid_coco(tmp_path, weights, capsys, monkeypatch):
    src, out = tmp_path / "photos", tmp_path / "out"
    make_folder(src, 8, broken=False)

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exit_now)
    interrupt_after_first_record(monkeypatch, 2)
    with pytest.raises(SystemExit) as e:
        main([str(src), "--task", "detect", "--object", OBJECT, "--out", str(out), "--weights", str(weights),
              "--max-batch", "1", "--recursive", "--quiet"])
    assert e.value.code == 130
    done = read_jsonl(out / "results.jsonl")
    coco = COCO(str(out / "coco.json"))
    assert sorted(i["file_name"] for i in coco.dataset["images"]) == sorted(r["path"] for r in done)
    assert len(done) >= 1

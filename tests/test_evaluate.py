"""engine/evaluate.py metric functions on hand-made cases (no model, no engine)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.training.evaluate import (CROWD_BUCKETS, GENERATORS, SIZE_BUCKETS, TILT_BUCKETS, average_precision, best_iou_pairs,
                                      box_iou, breakdowns, bucket, check_targets, detect_metrics, format_table, generate,
                                      greedy_tp, point_in_object, point_metrics, query_form)
from engine.training.scenes import SceneObject, scene_batch

A = (0.1, 0.1, 0.3, 0.3)
B = (0.5, 0.5, 0.9, 0.7)
C = (0.6, 0.1, 0.8, 0.2)


def test_box_iou():
    assert box_iou(A, A) == pytest.approx(1.0)
    assert box_iou(A, B) == 0.0
    assert box_iou((0, 0, 2, 1), (1, 0, 3, 1)) == pytest.approx(1 / 3)
    assert box_iou((0, 0, 0, 0), (0, 0, 0, 0)) == 0.0


def test_perfect_detections_score_one():
    m = detect_metrics([([A, B], [A, B]), ([C], [C]), ([], [])])
    assert m["ap50"] == pytest.approx(1.0)
    assert m["precision"] == m["recall"] == 1.0
    assert m["mean_iou"] == pytest.approx(1.0)
    assert m["count_exact"] == 1.0 and m["empty_accuracy"] == 1.0 and m["empty_queries"] == 1


def test_order_within_a_query_does_not_matter_for_matching():
    m = detect_metrics([([B, A], [A, B])])
    assert m["ap50"] == pytest.approx(1.0) and m["count_exact"] == 1.0


def test_missed_object():
    m = detect_metrics([([A], [A, B])])
    assert m["recall"] == 0.5 and m["precision"] == 1.0
    assert m["ap50"] == pytest.approx(51 / 101)     # precision 1 up to recall 0.5, nothing after
    assert m["count_exact"] == 0.0


def test_extra_object_after_the_right_one():
    m = detect_metrics([([A, C], [A])])
    assert m["ap50"] == pytest.approx(1.0)          # the extra box ranks after full recall
    assert m["precision"] == 0.5 and m["recall"] == 1.0
    assert m["count_exact"] == 0.0


def test_extra_object_before_the_right_one():
    m = detect_metrics([([C, A], [A])])
    assert m["ap50"] == pytest.approx(0.5)
    assert m["count_exact"] == 0.0


def test_emission_rank_pools_queries():
    # query 0's second box is wrong; query 1's first box is right: rank 0 of every query comes first
    m = detect_metrics([([A, C], [A]), ([B], [B])])
    assert m["ap50"] == pytest.approx(1.0) and m["precision"] == pytest.approx(2 / 3)


def test_iou_threshold_and_mean_iou():
    shifted = (0.1, 0.16, 0.3, 0.36)                # IoU 0.14/0.26 ≈ 0.54 with A
    worse = (0.1, 0.2, 0.3, 0.4)                    # IoU 1/3 with A
    assert box_iou(A, shifted) > 0.5 > box_iou(A, worse)
    assert greedy_tp([shifted], [A]) == [True]
    assert greedy_tp([worse], [A]) == [False]
    m = detect_metrics([([worse], [A])])
    assert m["ap50"] == 0.0 and m["recall"] == 0.0
    assert m["mean_iou"] == pytest.approx(1 / 3)     # localisation of the matched pair, below the threshold too
    assert best_iou_pairs([A, A], [A]) == [pytest.approx(1.0)]   # one-to-one


def test_duplicate_box_is_a_false_positive():
    assert greedy_tp([A, A], [A]) == [True, False]


def test_empty_query():
    assert detect_metrics([([], [])])["empty_accuracy"] == 1.0
    m = detect_metrics([([A], []), ([B], [B])])
    assert m["empty_accuracy"] == 0.0 and m["count_exact"] == 0.5 and m["precision"] == 0.5
    assert m["ap50"] == pytest.approx(0.5)           # same rank as the hit; query 0 comes first
    assert detect_metrics([([], [])])["ap50"] is None
    assert average_precision([], 3) == 0.0


def _ring_object() -> SceneObject:
    """A 10×10-pixel ring at pixels (20..29, 40..49) of a 100×200 (W×H) image: the centre is a hole."""
    mask = np.ones((10, 10), dtype=bool)
    mask[3:7, 3:7] = False
    return SceneObject(shape="circle", colour="red", box=(20 / 100, 40 / 200, 30 / 100, 50 / 200),
                       point=(20.5 / 100, 40.5 / 200), mask=mask)


def test_point_in_object_uses_the_pixel_mask():
    obj, size = _ring_object(), (100, 200)
    assert point_in_object((20.5 / 100, 40.5 / 200), obj, size)          # corner pixel
    assert point_in_object((29.9 / 100, 49.9 / 200), obj, size)          # last pixel
    assert not point_in_object((30.0 / 100, 45 / 200), obj, size)        # just right of the box
    assert not point_in_object((25 / 100, 45 / 200), obj, size)          # inside the box, in the hole
    assert not point_in_object((19.99 / 100, 45 / 200), obj, size)


def test_point_metrics_cases():
    obj, size = _ring_object(), (100, 200)
    on = (20.5 / 100, 40.5 / 200)
    hole = (25 / 100, 45 / 200)
    perfect = point_metrics([([on], [obj], size), ([], [], size)])
    assert perfect["hit_rate"] == 1.0 and perfect["recall"] == 1.0
    assert perfect["count_exact"] == 1.0 and perfect["empty_accuracy"] == 1.0
    missed = point_metrics([([hole], [obj], size)])
    assert missed["hit_rate"] == 0.0 and missed["recall"] == 0.0 and missed["count_exact"] == 1.0
    extra = point_metrics([([on, on], [obj], size)])                     # a second point on the same object
    assert extra["hit_rate"] == 1.0 and extra["recall"] == 1.0 and extra["count_exact"] == 0.0
    empty = point_metrics([([on], [], size)])
    assert empty["hit_rate"] == 0.0 and empty["empty_accuracy"] == 0.0 and empty["recall"] is None


def test_ground_truth_as_prediction_on_real_scenes():
    data = scene_batch(99, 40)
    d = detect_metrics([([o.box for o in q.matches], [o.box for o in q.matches]) for _, q in data])
    p = point_metrics([([o.point for o in q.matches], q.matches, s.image.size) for s, q in data])
    assert d["ap50"] == pytest.approx(1.0) and d["count_exact"] == 1.0
    assert p["hit_rate"] == 1.0 and p["recall"] == 1.0 and p["empty_accuracy"] == 1.0


def test_targets_and_table():
    d = detect_metrics([([A], [A])])
    p = point_metrics([([], [], (10, 10))])
    report = {"detect": {**d, "errors": 0}, "point": {**p, "errors": 0}, "count_exact": 1.0,
              "latency": {"threads": 2, "dtype": "bf16", "runs": 3, "median_ms": 90.0, "p90_ms": 130.0,
                          "mean_ms": 91.0}}
    report["targets"] = check_targets(report)
    assert report["targets"]["detect_ap50"]["met"] and report["targets"]["latency_ms_median"]["met"]
    assert report["targets"]["point_hit_rate"]["met"] is None
    table = format_table(report)
    assert "AP50" in table and "latency, one detect (2 threads, bf16, max_batch 1): median 90.0 ms" in table


def _coco_ap50(items) -> float:
    """AP at IoU 0.5 from pycocotools: one COCO image per query, one category, score = 1/(1+rank)."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    scale = 1000.0   # pixel-like units so COCO's area ranges treat every box alike
    images, anns, dets = [], [], []
    for i, (pred, gt) in enumerate(items):
        images.append({"id": i + 1, "width": scale, "height": scale})
        for g in gt:
            w, h = (g[2] - g[0]) * scale, (g[3] - g[1]) * scale
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": 1, "bbox": [g[0] * scale, g[1] * scale, w, h],
                         "area": w * h, "iscrowd": 0})
        for rank, p in enumerate(pred):
            dets.append({"image_id": i + 1, "category_id": 1, "score": 1.0 / (1 + rank),
                         "bbox": [p[0] * scale, p[1] * scale, (p[2] - p[0]) * scale, (p[3] - p[1]) * scale]})
    with contextlib.redirect_stdout(io.StringIO()):
        gt_coco = COCO()
        gt_coco.dataset = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "object"}]}
        gt_coco.createIndex()
        ev = COCOeval(gt_coco, gt_coco.loadRes(dets), "bbox")
        ev.params.iouThrs = np.array([0.5])
        ev.params.maxDets = [100, 100, 100]
        ev.evaluate()
        ev.accumulate()
    precision = ev.eval["precision"][0, :, 0, 0, -1]       # [recall thresholds] for area "all"
    return float(np.mean(np.maximum(precision, 0)))


def test_ap50_agrees_with_pycocotools():
    rng = np.random.default_rng(0)
    items = []
    for _ in range(60):
        gt = []
        for _ in range(int(rng.integers(0, 4))):
            x, y = rng.uniform(0, 0.8, 2)
            gt.append((x, y, x + rng.uniform(0.05, 0.2), y + rng.uniform(0.05, 0.2)))
        pred = []
        for g in gt:
            if rng.random() < 0.8:   # a found object, jittered (some below IoU 0.5)
                d = rng.normal(0, 0.015, 4)
                pred.append(tuple(np.array(g) + d))
        if rng.random() < 0.3:       # an extra box
            x, y = rng.uniform(0, 0.8, 2)
            pred.append((x, y, x + 0.1, y + 0.1))
        order = rng.permutation(len(pred))
        items.append(([pred[i] for i in order], gt))
    ours = detect_metrics(items)["ap50"]
    assert 0.1 < ours < 0.95
    assert ours == pytest.approx(_coco_ap50(items), abs=1e-6)


@pytest.mark.parametrize("generator", GENERATORS)
def test_breakdowns_of_perfect_answers(generator):
    """Ground truth as the answer scores 1 in every bucket of both generators; buckets cover all objects."""
    data = generate(generator, 77, 30)
    det = [[o.box for o in q.matches] for _, q in data]
    pts = [[o.point for o in q.matches] for _, q in data]
    parts = breakdowns(data, det, pts)
    n_objects = sum(len(q.matches) for _, q in data)
    for key in ("tilt", "size", "shape"):
        assert sum(v["objects"] for v in parts[key].values()) == n_objects
        assert all(v["detect_recall"] == 1.0 and v["point_recall"] == 1.0 for v in parts[key].values())
    for key in ("crowd", "form", "background"):
        assert sum(v["queries"] for v in parts[key].values()) == len(data)
        assert all(v["detect_ap50"] in (None, pytest.approx(1.0)) for v in parts[key].values())
    assert parts["size_4pct_up"]["detect_recall"] in (None, 1.0)
    # a miss shows up in its object's buckets
    i = next(k for k, (_, q) in enumerate(data) if q.matches)
    det[i] = []
    missed = data[i][1].matches[0]
    assert breakdowns(data, det, pts)["tilt"][bucket(missed.tilt, TILT_BUCKETS)]["detect_recall"] < 1.0


def test_bucket_labels():
    assert bucket(0.0, TILT_BUCKETS) == "0-10" and bucket(29.9, TILT_BUCKETS) == "20-30" and bucket(44, TILT_BUCKETS) == "30+"
    assert bucket(0.05, SIZE_BUCKETS) == "0.04-0.1" and bucket(3, CROWD_BUCKETS) == "0-6"
    assert query_form("The Red Circles") == "colour shape" and query_form("STARS") == "shape" and query_form("blue") == "colour"


def test_evaluate_writes_only_where_told(tmp_path, monkeypatch):
    """No --json: nothing is written (not into the weights directory either)."""
    import engine.training.evaluate as E

    fake = {"detect": {**detect_metrics([([A], [A])]), "errors": 0}, "point": {**point_metrics([([], [], (10, 10))]), "errors": 0},
            "count_exact": 1.0, "weights": str(tmp_path)}
    fake["targets"] = check_targets(fake)
    monkeypatch.setattr(E, "evaluate", lambda *a, **k: fake)
    assert E.main(["--weights", str(tmp_path), "--n", "1"]) == 0
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "r.json"
    assert E.main(["--weights", str(tmp_path), "--n", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["count_exact"] == 1.0


def test_qa_scorers_on_hand_examples():
    from engine.training.evaluate import score_answer

    right = [("count", "3", "3"), ("count", " Three. ", "3"), ("count", "none", "0"), ("yes_no", "Yes.", "yes"),
             ("colour", " green", "green"), ("which", "star and circle", "circle and star"),
             ("which", "circles, stars", "circle and star"), ("which", "None.", "none"),
             ("list", "red circle and blue star", "blue star and red circle"),
             ("caption", "two red circles and a blue star", "a blue star and two red circles"),
             ("caption", "3 red circles and a blue star", "a blue star and two red circles"),
             ("caption_counts", "the image shows two red circles and a blue star.", "a blue star and two red circles"),
             ("caption", "No shapes.", "no shapes")]
    wrong = [("count", "4", "3"), ("count", "3 circles", "3"), ("count", "", "0"), ("yes_no", "yes no", "yes"),
             ("yes_no", "no", "yes"), ("colour", "red", "green"), ("colour", "greenish", "green"),
             ("which", "circle", "circle and star"), ("which", "", "none"), ("which", "circle", "none"),
             ("list", "red circle", "blue star and red circle"), ("list", "red star and blue circle", "blue star and red circle"),
             ("caption", "two red circles", "a blue star and two red circles"),
             ("caption", "a blue star, two red circles and a green cross", "a blue star and two red circles"),
             ("caption_counts", "3 red circles and a blue star", "a blue star and two red circles"),
             ("caption", "", "no shapes"), ("caption", "a red circle", "no shapes")]
    assert [score_answer(*c) for c in right] == [True] * len(right)
    assert [score_answer(*c) for c in wrong] == [False] * len(wrong)
    with pytest.raises(ValueError):
        score_answer("riddle", "x", "y")


def test_qa_metrics_and_table():
    from engine.training.evaluate import format_qa_table, qa_metrics

    m = qa_metrics([("count", "3", "3"), ("count", None, "2"), ("caption", "a red star", "a red star"),
                    ("caption", "two red stars", "a red star")])
    assert m["count"]["asked"] == 2 and m["count"]["accuracy"] == 0.5
    assert m["count"]["failures"] == [{"expected": "2", "got": None}]
    assert m["caption"]["accuracy"] == 1.0 and m["caption_counts"]["accuracy"] == 0.5
    table = format_qa_table({"scenes": 1, "seed": 3, "requests": 4, "errors": 1, "seconds": 0.5, "per_kind": m,
                             "targets": {"count": {"value": 0.5, "target": 0.9, "met": False}}})
    assert "count" in table and "50.0%" in table and "✗" in table


def test_run_qa_through_the_engine_api():
    """Every kind is asked through Engine.submit; an engine that answers right scores 1.0, one that fails 0."""
    from engine.training.evaluate import run_qa

    class Handle:
        def __init__(self, value):
            self.value = value

        def result(self):
            if isinstance(self.value, Exception):
                raise self.value
            return self.value

    class Oracle:   # answers with the canonical text it is told by `answers`
        def __init__(self, answers):
            self.answers, self.calls = answers, []

        def submit(self, image, skill, question=None, *, length=None, max_tokens=None):
            self.calls.append((skill, question, length, max_tokens))
            return Handle(self.answers.pop(0))

    from engine.training.qa import qa_suite
    from engine.training.scenes import OWN_SCENES, make_scene
    canon = []
    for i in range(3):
        scene = make_scene(np.random.default_rng([5, i]), **OWN_SCENES)
        canon += [q for q in qa_suite(np.random.default_rng([5, i, 7]), scene)]
    good = Oracle([{"caption": q.answer} if q.question is None else {"answer": q.answer} for q in canon])
    report = run_qa(good, 5, 3)
    assert report["requests"] == len(canon) and report["errors"] == 0
    assert all(row["accuracy"] == 1.0 for row in report["per_kind"].values())
    assert {c[0] for c in good.calls} == {"query", "caption"}
    bad = Oracle([RuntimeError("boom")] + [{"caption": "x"} if q.question is None else {"answer": "x"} for q in canon[1:]])
    report = run_qa(bad, 5, 3)
    assert report["errors"] == 1 and all(row["accuracy"] < 1.0 for row in report["per_kind"].values())


def test_scores_rank_predictions_across_queries():
    # query 0's wrong box comes first in emission order; ranked by score it comes after every hit
    items = [([C, A], [A]), ([B], [B])]
    by_order = detect_metrics(items)
    by_score = detect_metrics(items, scores=[[0.2, 0.9], [0.8]])
    assert by_order["ap50"] == by_order["ap50_emission_order"] == pytest.approx(2 / 3)  # precision 2/3 at full recall
    assert by_score["ap50"] == pytest.approx(1.0)
    assert by_score["ap50_emission_order"] == by_order["ap50"]
    assert by_score["precision"] == by_order["precision"] == pytest.approx(2 / 3)


def test_scores_order_the_matching_within_a_query():
    # two boxes on one object: the higher-scored one takes it, the other is the false positive
    near = (0.1, 0.12, 0.3, 0.32)
    assert box_iou(A, near) > 0.5
    m = detect_metrics([([near, A], [A])], scores=[[0.4, 0.9]])
    assert m["ap50"] == pytest.approx(1.0) and m["mean_iou"] == pytest.approx(1.0)
    low = detect_metrics([([near, A], [A])], scores=[[0.9, 0.4]])
    assert low["ap50"] == pytest.approx(1.0) and low["precision"] == 0.5
    assert detect_metrics([([A], [A])], scores=[[0.5]])["ap50"] == pytest.approx(1.0)
    with pytest.raises(AssertionError):
        detect_metrics([([A], [A])], scores=[[]])


def test_engine_options_reach_the_evaluated_engine(monkeypatch, capsys):
    import engine.training.evaluate as E
    from engine.training.evaluate import engine_options

    assert engine_options(["kernels=torch", "use_graphs=false", "prefix_cache_size=0", "device_crops=none"]) == {
        "kernels": "torch", "use_graphs": False, "prefix_cache_size": 0, "device_crops": None}
    for bad in ("kernels", "max_batch=4", "colour=red"):
        with pytest.raises(ValueError, match="FIELD=VALUE"):
            engine_options([bad])
    seen = {}

    def fake(*a, **k):
        seen.update(k)
        raise SystemExit(0)

    monkeypatch.setattr(E, "evaluate", fake)
    with pytest.raises(SystemExit):
        E.main(["--n", "1", "--engine", "pipelined=false", "--engine", "group_prefix=never"])
    assert seen["engine_options"] == {"pipelined": False, "group_prefix": "never"}
    with pytest.raises(SystemExit) as err:
        E.main(["--engine", "nope=1"])
    assert err.value.code == 2 and "FIELD=VALUE" in capsys.readouterr().err


def test_blocking_and_pipelined_engines_score_alike():
    """The engine's outputs do not depend on how it schedules: the same report either way."""
    from engine.training.evaluate import evaluate

    reports = [evaluate(None, n=6, latency_runs=0, quiet=True, generator="independent", engine_options=options)
               for options in ({}, {"pipelined": False})]
    for key in ("detect", "point"):
        for metric in ("ap50", "precision", "recall", "count_exact", "hit_rate"):
            assert reports[0][key].get(metric) == reports[1][key].get(metric)
    assert reports[1]["engine_options"] == {"pipelined": False} and "engine_options" not in reports[0]

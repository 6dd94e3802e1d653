"""Per-object scores: in [0, 1], deterministic, tied to the model's own probabilities, and a
ranking that helps COCO AP on the embedded model's held-out scenes."""

from __future__ import annotations

import contextlib
import io
import math

import pytest

from engine import Engine
from engine.model.checkpoint import load_model, random_state_dict
from engine.model.config import TINY
from tests.conftest import random_image, torch_threads, write_tiny_checkpoint

IMAGES = [random_image(7), random_image(8, 230, 300)]


def items(result: dict) -> list[dict]:
    return result.get("objects", result.get("points"))


def margin_model(tmp_path_factory, tokenizer, margin: float):
    """Random tiny weights whose coord-vs-EOS decision is the bias `margin` alone (their lm_head
    rows are zero): p(another object) = sigmoid(margin) at every decision, every request runs to
    its cap, and everything but that decision is identical across margins."""
    state = dict(random_state_dict(TINY, seed=3))
    weight, bias = state["model.text.lm_head.weight"].clone(), state["model.text.lm_head.bias"].clone()
    for token in (TINY.tokens.coord_id, TINY.tokens.eos_id):
        weight[token], bias[token] = 0.0, 0.0
    bias[TINY.tokens.coord_id] = margin
    state["model.text.lm_head.weight"], state["model.text.lm_head.bias"] = weight, bias
    return load_model(write_tiny_checkpoint(tmp_path_factory.mktemp("margin"), state, tokenizer), dtype="fp64")


def run(model, tokenizer, **config) -> list[dict]:
    engine = Engine(model, tokenizer, **{"max_batch": 4, **config})
    with torch_threads(1):
        handles = [engine.submit(image, skill, "red circle", max_objects=3) for image in IMAGES
                   for skill in ("point", "detect")]
        return [h.result() for h in handles]


def test_scores_are_probabilities_and_deterministic(tiny_model64, tokenizer):
    first = run(tiny_model64, tokenizer)
    scores = [o["score"] for r in first for o in items(r)]
    assert scores and all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    assert run(tiny_model64, tokenizer) == first  # same request, same scores
    assert run(tiny_model64, tokenizer, pipelined=False, max_batch=1) == first  # batch-mates and mode don't matter


def test_objects_barely_emitted_score_lower(tmp_path_factory, tokenizer):
    # The repetition guard is off: this random checkpoint repeats a point, and the test needs the cap.
    barely = run(margin_model(tmp_path_factory, tokenizer, 0.05), tokenizer, repeat_guard=False)
    surely = run(margin_model(tmp_path_factory, tokenizer, 8.0), tokenizer, repeat_guard=False)
    p_barely, p_surely = 1 / (1 + math.exp(-0.05)), 1 / (1 + math.exp(-8.0))
    for low, high in zip(barely, surely):
        assert len(items(low)) == len(items(high)) == 3  # both run to the cap, same geometry
        for a, b in zip(items(low), items(high)):
            assert {k: v for k, v in a.items() if k != "score"} == {k: v for k, v in b.items() if k != "score"}
            assert a["score"] < b["score"]
            assert a["score"] == pytest.approx(b["score"] * p_barely / p_surely, abs=2e-4)
            assert a["score"] <= p_barely + 1e-4


def coco_ap(data, results, scored: bool) -> float:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images, gts, dts = [], [], []
    for image_id, ((scene, query), result) in enumerate(zip(data, results), start=1):
        w, h = scene.image.size
        images.append({"id": image_id, "width": w, "height": h})
        for o in query.matches:
            x0, y0, x1, y1 = o.box
            gts.append({"id": len(gts) + 1, "image_id": image_id, "category_id": 1, "iscrowd": 0,
                        "bbox": [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h], "area": (x1 - x0) * (y1 - y0) * w * h})
        for o in result["objects"]:
            dts.append({"image_id": image_id, "category_id": 1, "score": o["score"] if scored else 1.0,
                        "bbox": [o["x_min"] * w, o["y_min"] * h, (o["x_max"] - o["x_min"]) * w,
                                 (o["y_max"] - o["y_min"]) * h]})
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": gts, "categories": [{"id": 1, "name": "object"}]}
        gt.createIndex()
        evaluation = COCOeval(gt, gt.loadRes(dts), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return float(evaluation.stats[0])


def test_scores_do_not_lower_coco_ap_on_held_out_scenes():
    from engine.training.scenes import scene_batch

    data = scene_batch(12345, 32)  # the evaluation seed: never trained on
    engine = Engine.from_pretrained(max_batch=16)
    results = [h.result() for h in [engine.submit(scene.image, "detect", query.text) for scene, query in data]]
    assert sum(len(r["objects"]) for r in results) > 20
    assert len({o["score"] for r in results for o in r["objects"]}) > 10  # a ranking, not a constant
    assert coco_ap(data, results, scored=True) >= coco_ap(data, results, scored=False)

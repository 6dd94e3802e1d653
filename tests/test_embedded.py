"""The shipped model (assets/model) loads by default and finds the objects of fixed generated scenes."""

from __future__ import annotations

import pytest

from engine import DEFAULT_WEIGHTS, Engine
from engine.training.scenes import scene_batch

SEED = 2024  # neither the training seeds (0, 1) nor the evaluation seed (12345)


def iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained(max_batch=8)  # no weights given: the embedded model


def test_default_weights_are_the_embedded_model(engine):
    assert DEFAULT_WEIGHTS.name == "model" and DEFAULT_WEIGHTS.parent.name == "assets"
    assert engine.model_config.text.vocab_size == 512  # the `embedded` preset, not moondream2


def test_finds_the_objects_of_fixed_scenes(engine):
    """The first 8 scenes of a held-out seed whose query names 1–4 objects (no selection on results).

    The model is not perfect (README: its evaluated recall is below 100 %), so the bar is set on
    the whole set: at least 3 of 4 ground-truth objects found with IoU ≥ 0.5, and no scene's count
    off by more than one. A random or broken model finds none.
    """
    cases = [(s, q) for s, q in scene_batch(SEED, 60) if 1 <= len(q.matches) <= 4][:8]
    assert len(cases) == 8
    handles = [engine.submit(scene.image, "detect", query.text, max_objects=10) for scene, query in cases]
    found = total = 0
    for (scene, query), handle in zip(cases, handles):
        boxes = [(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in handle.result()["objects"]]
        assert abs(len(boxes) - len(query.matches)) <= 1, (query.text, boxes)
        found += sum(max([iou(t.box, b) for b in boxes] or [0.0]) >= 0.5 for t in query.matches)
        total += len(query.matches)
    assert found >= 0.75 * total, f"found {found} of {total} objects"


def test_empty_query_gives_no_objects(engine):
    """Scenes whose query matches nothing: the model answers EOS at once. The model is not perfect:
    scenes now hold objects down to 2 % of the short side at any rotation, and it still mistakes
    small stars, diamonds and squares (3-7 % of the side) for triangles and crosses (README: the
    empty-query accuracy by generator), so the bar is half of the first 8 such scenes; a model that
    always finds something fails."""
    cases = [(s, q) for s, q in scene_batch(SEED, 120) if not q.matches and s.objects][:8]
    assert len(cases) == 8
    handles = [engine.submit(scene.image, "detect", query.text, max_objects=10) for scene, query in cases]
    empty = [h.result() == {"objects": []} for h in handles]
    assert sum(empty) >= 4, [q.text for (_, q), e in zip(cases, empty) if not e]

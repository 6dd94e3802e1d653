"""The independent scene generator: deterministic, exact enough ground truth, written apart from training."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from engine.serving.skills import normalize_query
from engine.training import independent_scenes as ind
from engine.training.scenes import COLOURS, QUERY_WORDS, SHAPES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def batch():
    return ind.independent_batch(5, 60)


def test_deterministic():
    a, b = ind.independent_batch(9, 3), ind.independent_batch(9, 3)
    for (sa, qa), (sb, qb) in zip(a, b):
        assert sa.image.tobytes() == sb.image.tobytes() and sa.objects == sb.objects and qa == qb


def test_ground_truth(batch):
    for scene, query in batch:
        w, h = scene.image.size
        assert 160 <= min(w, h) and max(w, h) <= 640
        for o in scene.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            assert o.mask.shape == (round(y1 * h) - round(y0 * h), round(x1 * w) - round(x0 * w))
            assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()
            col, row = int(o.point[0] * w) - round(x0 * w), int(o.point[1] * h) - round(y0 * h)
            assert o.mask[row, col]
            assert 0 <= o.tilt <= 90 and 0 < o.size < 0.5
        # the query, as the engine normalises it, names vocabulary words; matches follow the words
        words = normalize_query(query.text).split()
        assert 1 <= len(words) <= 2 and all(wd in QUERY_WORDS for wd in words)
        colour = words[0] if words[0] in COLOURS else None
        shape = words[-1] if words[-1] in SHAPES else None
        expected = [o for o in scene.objects if (colour is None or o.colour == colour) and (shape is None or o.shape == shape)]
        assert Counter(map(id, expected)) == Counter(map(id, query.matches))


def test_variety(batch):
    counts = [len(s.objects) for s, _ in batch]
    assert max(counts) >= 15 and min(counts) <= 3
    assert 0.1 < sum(not q.matches for _, q in batch) / len(batch) < 0.45
    assert any(q.text != q.text.lower() for _, q in batch)
    objs = [o for s, _ in batch for o in s.objects]
    assert {o.shape for o in objs} >= set(SHAPES) and {o.shape for o in objs} & set(ind.OTHER_SHAPES)
    assert max(o.tilt for o in objs if o.shape == "square") > 30
    assert len({s.background for s, _ in batch}) == 5


def test_written_apart_from_the_training_generator():
    """It takes only the scene data types from engine.training.scenes, and training never imports it."""
    tree = ast.parse((ROOT / "engine/training/independent_scenes.py").read_text())
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert {name for mod, name in imported if mod == "engine.training.scenes"} == {"Query", "Scene", "SceneObject"}
    for path in ("engine/training/train.py", "engine/training/scenes.py", "engine/training/vocab.py"):
        assert "independent" not in (ROOT / path).read_text()
    assert not set(ind.PALETTE.values()) & set(COLOURS.values())

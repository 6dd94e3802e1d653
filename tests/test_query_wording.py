"""Query normalisation (case, plurals, articles, spaces) and the repetition guard."""

from __future__ import annotations

import pytest

from engine.serving.skills import (DUPLICATE_DISTANCE, DUPLICATE_IOU, ObjectBuilder, is_duplicate, normalize_query, singular,
                                   validate_request)
from engine.training.scenes import scene_batch


@pytest.mark.parametrize("typed, canonical", [
    ("red circle", "red circle"), ("Red Circle", "red circle"), ("RED CIRCLE", "red circle"),
    ("red circles", "red circle"), ("the red circles", "red circle"), ("A red circle.", "red circle"),
    ("  all   the Crosses ", "cross"), ("crosses", "cross"), ("boxes", "box"), ("berries", "berry"),
    ("Stars!", "star"), ("hexagons", "hexagon"), ("the", "the"), ("glass", "glass"), ("bus", "bus"),
    ("zebra crossing at night", "zebra crossing at night"), ("🔴 e\u0301", "🔴 e\u0301"), ("עיגול", "עיגול"),
    ("Red, circles?!", "red circle"),
])
def test_normalize_query(typed, canonical):
    assert normalize_query(typed) == canonical
    assert normalize_query(canonical) == canonical          # idempotent


def test_singular_leaves_non_plurals():
    for word in ("cross", "status", "axis", "gas", "red", "this", "famous"):
        assert singular(word) == word


def test_validate_request_normalises():
    assert validate_request("detect", "  The RED\tCircles ", 5) == ("red circle", 5)


def test_object_builder_drops_a_duplicate_and_flags_it():
    b = ObjectBuilder("detect")
    b.add_coord(0.5)
    b.add_coord(0.5)
    assert b.add_size(0.2, 0.2) is not None
    b.add_coord(0.505)            # IoU with the first ≈ 0.95 > DUPLICATE_IOU
    b.add_coord(0.5)
    assert b.add_size(0.2, 0.2) is None and b.repeated and len(b.objects) == 1
    p = ObjectBuilder("point")
    p.add_coord(0.3)
    assert p.add_coord(0.3) is not None
    p.add_coord(0.3 + DUPLICATE_DISTANCE / 2)
    assert p.add_coord(0.3) is None and p.repeated and p.result() == {"points": [{"x": 0.3, "y": 0.3, "score": 1.0}]}
    off = ObjectBuilder("point", guard=False)
    for _ in range(4):
        off.add_coord(0.3)
    assert len(off.objects) == 2 and not off.repeated


def test_duplicate_rule():
    a = {"x_min": 0.1, "y_min": 0.1, "x_max": 0.3, "y_max": 0.3}
    near = {"x_min": 0.101, "y_min": 0.1, "x_max": 0.301, "y_max": 0.3}
    beside = {"x_min": 0.3, "y_min": 0.1, "x_max": 0.5, "y_max": 0.3}
    half = {"x_min": 0.1, "y_min": 0.1, "x_max": 0.3, "y_max": 0.2}     # IoU 0.5: a different object
    assert is_duplicate(near, a) and not is_duplicate(beside, a) and not is_duplicate(half, a)
    assert DUPLICATE_IOU == 0.9
    assert is_duplicate({"x": 0.5, "y": 0.5}, {"x": 0.505, "y": 0.5}) and not is_duplicate({"x": 0.5, "y": 0.5}, {"x": 0.52, "y": 0.5})


def test_wording_variants_give_the_same_answer():
    """Through the engine and the shipped model: case, plural and article do not change the answer."""
    from engine import Engine

    engine = Engine.from_pretrained(max_batch=8)
    cases = [(s, q) for s, q in scene_batch(31, 40) if q.matches and " " in q.text][:3]
    assert cases
    for scene, query in cases:
        colour, shape = query.text.split()
        variants = [query.text, f"{colour.title()} {shape.title()}", query.text.upper(), f"{colour} {shape}s",
                    f"the {colour} {shape}", f"All the {colour.upper()} {shape}s."]
        for skill in ("detect", "point"):
            handles = [engine.submit(scene.image, skill, v, max_objects=10) for v in variants]
            answers = [h.result() for h in handles]
            assert all(a == answers[0] for a in answers), (skill, query.text)

"""Synthetic scenes: determinism, exact ground truth, query matching, variety, speed."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.training import scenes
from engine.serving.skills import normalize_query
from engine.training.scenes import (COLOUR_RANGES, COLOURS, DISTRACTOR_COLOURS, DISTRACTOR_SHAPES, OWN_SCENES, QUERY_WORDS,
                                    SHAPES, Query, Scene, SceneObject, hsv_shade, in_range, make_query, make_scene,
                                    render_shape, scene_batch, vary_wording)


@pytest.fixture(scope="module")
def batch() -> list[tuple[Scene, Query]]:
    return scene_batch(1234, 300)


def _pixel_rect(obj: SceneObject, w: int, h: int) -> tuple[int, int, int, int]:
    """Box in pixel edges (x0, y0, x1, y1); asserts the normalised box sits on the pixel grid."""
    x0, y0, x1, y1 = obj.box
    px = (x0 * w, y0 * h, x1 * w, y1 * h)
    rect = tuple(int(round(v)) for v in px)
    assert all(abs(a - b) < 1e-6 for a, b in zip(px, rect)), obj.box
    return rect  # type: ignore[return-value]


def _colour_hits(arr: np.ndarray, rgb) -> np.ndarray:
    return (arr == np.array(rgb, dtype=np.uint8)).all(axis=-1)


# ------------------------------------------------------------------ vocabulary

def test_vocabulary():
    assert len(SHAPES) >= 5 and len(set(SHAPES)) == len(SHAPES)
    assert len(COLOURS) >= 6
    assert set(QUERY_WORDS) == set(SHAPES) | set(COLOURS)
    assert all(" " not in w and w == w.lower() for w in QUERY_WORDS)
    assert not set(SHAPES) & set(COLOURS)


def _assert_disjoint(rng: np.random.Generator, ranges: dict) -> None:
    """Every sampled shade of each named range lies in its own range and in no other."""
    for name, spec in ranges.items():
        for _ in range(300):
            rgb = np.rint(hsv_shade(rng, spec))
            assert in_range(rgb, spec), (name, rgb)
            others = [o for o, sp in ranges.items() if o != name and in_range(rgb, sp, tol=0.0)]
            assert not others, (name, rgb, others)


def test_colour_ranges_are_disjoint():
    """Every shade of a colour name (known or distractor) lies in its own range and in no other."""
    assert set(COLOUR_RANGES) == set(COLOURS) and not set(DISTRACTOR_COLOURS) & set(COLOURS)
    assert all(in_range(COLOURS[name], spec) for name, spec in COLOUR_RANGES.items())
    _assert_disjoint(np.random.default_rng(3), {**COLOUR_RANGES, **DISTRACTOR_COLOURS})


def test_backgrounds_stay_far_from_object_colours():
    rng = np.random.default_rng(5)
    kinds = Counter()
    for _ in range(120):
        img, kind = scenes.background(rng, 97, 131)
        assert img.shape == (131, 97, 3) and img.dtype == np.uint8
        kinds[kind] += 1
        px = np.unique(img.reshape(-1, 3), axis=0)
        # no background pixel has the shade of a vocabulary colour
        clash = [(tuple(c), n) for c in px[:: max(1, len(px) // 400)] for n, sp in COLOUR_RANGES.items()
                 if in_range(c, sp, tol=0.0)]
        assert not clash, (kind, clash[:3])
    assert set(kinds) == set(scenes.BACKGROUNDS)


def test_background_colour_draws_as_the_scalar_loop_did():
    """`bg_colour` (vectorised) returns what one colorsys call per candidate gave, and leaves the
    generator where that loop left it, so the training stream is unchanged."""
    import colorsys

    def scalar(rng):
        for _ in range(4):
            cand = np.array([colorsys.hsv_to_rgb(rng.random(), rng.uniform(0.0, 0.28), rng.uniform(0.32, 0.72))
                             for _ in range(64)]) * 255.0
            dist = np.sqrt(((cand[:, None, :] - scenes.OBJECT_RGB[None]) ** 2).sum(-1)).min(1)
            ok = np.flatnonzero(dist >= scenes.MIN_BG_DISTANCE)
            if ok.size:
                return cand[ok[0]]
        return np.array([128.0, 128.0, 128.0])

    for seed in range(300):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        assert np.array_equal(scenes.bg_colour(a), scalar(b))
        assert a.random() == b.random()
    h = np.array([0.0, 1 / 6, 0.5, 0.9999999, 5 / 6, 0.3])
    s = np.array([0.0, 0.1, 0.28, 0.0, 0.2, 1.0])
    v = np.array([0.32, 0.5, 0.72, 0.4, 0.6, 1.0])
    assert np.array_equal(scenes.hsv_to_rgb(h, s, v), np.array([colorsys.hsv_to_rgb(*x) for x in zip(h, s, v)]))


@pytest.mark.parametrize("shape", SHAPES)
def test_render_shape(shape):
    masks = [render_shape(shape, d, a) for d in (12, 31.5, 80) for a in (-10, 0, 10, 45, 137)]
    for m in masks:
        assert m.dtype == bool and m.any()
        # cropped tight: every border row/column touches the shape
        assert m[0].any() and m[-1].any() and m[:, 0].any() and m[:, -1].any()
        # convex-ish: the centroid pixel is inside
        ys, xs = np.nonzero(m)
        assert m[int(round(ys.mean())), int(round(xs.mean()))]
    big = render_shape(shape, 200, 0)
    fill = big.mean()
    expected = {"circle": 0.785, "square": 1.0, "triangle": 0.5, "star": 0.36, "cross": 0.54,
                "hexagon": 0.75, "diamond": 0.5}[shape]
    assert abs(fill - expected) < 0.05, (shape, fill)


def test_shapes_differ_pixelwise():
    ms = {s: render_shape(s, 60, 0) for s in SHAPES}
    for a, b in itertools.combinations(SHAPES, 2):
        ma, mb = ms[a], ms[b]
        h, w = max(ma.shape[0], mb.shape[0]), max(ma.shape[1], mb.shape[1])
        pa = np.zeros((h, w), bool); pa[:ma.shape[0], :ma.shape[1]] = ma
        pb = np.zeros((h, w), bool); pb[:mb.shape[0], :mb.shape[1]] = mb
        iou = (pa & pb).sum() / (pa | pb).sum()
        assert iou < 0.9, (a, b, iou)


# ------------------------------------------------------------------ determinism

def test_deterministic_from_seed():
    a, b = scene_batch(7, 12), scene_batch(7, 12)
    for (sa, qa), (sb, qb) in zip(a, b):
        assert sa.image.size == sb.image.size and sa.image.tobytes() == sb.image.tobytes()
        assert sa.objects == sb.objects and qa == qb
    c = scene_batch(8, 12)
    assert any(sa.image.tobytes() != sc.image.tobytes() for (sa, _), (sc, _) in zip(a, c))


def test_batch_items_depend_only_on_seed_and_index():
    short, long = scene_batch(3, 4), scene_batch(3, 9)
    for (sa, qa), (sb, qb) in zip(short, long):
        assert sa.image.tobytes() == sb.image.tobytes() and qa == qb


def test_make_scene_deterministic_from_generator():
    s1 = make_scene(np.random.default_rng(99))
    s2 = make_scene(np.random.default_rng(99))
    assert s1.image.tobytes() == s2.image.tobytes() and s1.objects == s2.objects


# ------------------------------------------------------------------ ground truth

def _check_scene(scene: Scene, shades: dict = COLOUR_RANGES) -> None:
    arr = np.asarray(scene.image)
    w, h = scene.image.size
    assert arr.shape == (h, w, 3) and scene.image.mode == "RGB"
    for i, obj in enumerate(scene.objects):
        assert obj.shape in SHAPES + DISTRACTOR_SHAPES and obj.colour in {**COLOURS, **DISTRACTOR_COLOURS}
        assert obj.known or obj.shape in DISTRACTOR_SHAPES or obj.colour in DISTRACTOR_COLOURS
        assert in_range(obj.rgb, {**shades, **DISTRACTOR_COLOURS}[obj.colour])
        x0, y0, x1, y1 = obj.box
        assert 0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0
        px0, py0, px1, py1 = _pixel_rect(obj, w, h)
        mask = obj.mask
        assert mask.shape == (py1 - py0, px1 - px0)
        # The full shape touches all four box edges (tight box).
        assert mask[0].any() and mask[-1].any() and mask[:, 0].any() and mask[:, -1].any()
        # From the image alone: pixels of the object's exact colour in the box grown by one pixel.
        gx0, gy0, gx1, gy1 = max(px0 - 1, 0), max(py0 - 1, 0), min(px1 + 1, w), min(py1 + 1, h)
        hits = _colour_hits(arr[gy0:gy1, gx0:gx1], obj.rgb)
        inner = hits[py0 - gy0:py1 - gy0, px0 - gx0:px1 - gx0]
        assert hits.sum() == inner.sum(), "object colour found outside its box"
        assert not (inner & ~mask).any(), "object colour outside its mask"
        visible = inner & mask
        assert visible.sum() >= (1 - scenes.MAX_COVERED) * mask.sum() - 1e-9
        # Hidden mask pixels are covered by objects drawn later.
        later = [o.rgb for o in scene.objects[i + 1:]]
        hidden = arr[py0:py1, px0:px1][mask & ~inner]
        if hidden.size:
            assert later
            assert np.any([_colour_hits(hidden, c) for c in later], axis=0).all()
        else:  # fully visible: the box is exactly the bounding box of the image pixels
            ys, xs = np.nonzero(visible)
            assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (0, 0, px1 - px0, py1 - py0)
        # The point is the centre of a visible pixel of the object.
        px, py = obj.point
        cx, cy = px * w - 0.5, py * h - 0.5
        assert abs(cx - round(cx)) < 1e-6 and abs(cy - round(cy)) < 1e-6
        assert x0 < px < x1 and y0 < py < y1
        assert _colour_hits(arr[int(round(cy)), int(round(cx))], obj.rgb)
    # Same-colour objects never touch.
    for a, b in itertools.combinations(scene.objects, 2):
        if a.colour == b.colour:
            ax0, ay0, ax1, ay1 = _pixel_rect(a, w, h)
            bx0, by0, bx1, by1 = _pixel_rect(b, w, h)
            assert ax1 < bx0 or bx1 < ax0 or ay1 < by0 or by1 < ay0


def test_ground_truth_exact(batch):
    for scene, _ in batch:
        _check_scene(scene)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), lo=st.integers(24, 300), extra=st.integers(0, 200),
       n=st.integers(0, 12), distractors=st.integers(0, 4))
def test_ground_truth_property(seed, lo, extra, n, distractors):
    scene = make_scene(np.random.default_rng(seed), min_objects=n, max_objects=n, size_range=(lo, lo + extra),
                       distractors=distractors, crowd_rate=0.5)
    w, h = scene.image.size
    assert lo <= w <= lo + extra and lo <= h <= lo + extra
    assert 1 / scenes.MAX_ASPECT <= w / h <= scenes.MAX_ASPECT
    assert len(scene.objects) <= n + distractors
    _check_scene(scene)


def test_some_objects_overlap(batch):
    partly_hidden = 0
    for scene, _ in batch:
        arr = np.asarray(scene.image)
        w, h = scene.image.size
        for obj in scene.objects:
            x0, y0, x1, y1 = _pixel_rect(obj, w, h)
            vis = _colour_hits(arr[y0:y1, x0:x1], obj.rgb) & obj.mask
            partly_hidden += vis.sum() < obj.mask.sum()
    assert partly_hidden >= 10


# ------------------------------------------------------------------ variety

def test_counts_sizes_and_aspects_vary(batch):
    counts = Counter(len(s.objects) for s, _ in batch)
    assert set(range(11)) <= set(counts), counts
    assert max(counts) <= 10
    sizes = [s.image.size for s, _ in batch]
    ws, hs = [a for a, _ in sizes], [b for _, b in sizes]
    assert min(ws) >= 96 and max(ws) <= 512 and min(hs) >= 96 and max(hs) <= 512
    assert min(ws) < 160 and max(ws) > 440 and min(hs) < 160 and max(hs) > 440
    aspects = [a / b for a, b in sizes]
    assert min(aspects) < 0.6 and max(aspects) > 1.6
    assert all(1 / scenes.MAX_ASPECT <= a <= scenes.MAX_ASPECT for a in aspects)
    objs = [o for s, _ in batch for o in s.objects]
    assert {o.shape for o in objs} == set(SHAPES) and {o.colour for o in objs} == set(COLOURS)
    widths = [o.box[2] - o.box[0] for o in objs]
    assert min(widths) < 0.04 and max(widths) > 0.3
    # any rotation: every rotating shape shows up tilted by more than 20 degrees
    assert {o.shape for o in objs if o.tilt > 20} == set(SHAPES) - {"circle"}


@pytest.fixture(scope="module")
def own_batch() -> list[tuple[Scene, Query]]:
    return scene_batch(4321, 120, **OWN_SCENES)


def test_training_distribution_has_crowds_distractors_and_effects(own_batch):
    counts = [len(s.objects) for s, _ in own_batch]
    assert max(counts) >= 20 and sum(c >= 11 for c in counts) >= 20
    objs = [o for s, _ in own_batch for o in s.objects]
    assert {o.shape for o in objs if not o.known} & set(DISTRACTOR_SHAPES)
    assert {o.colour for o in objs if not o.known} & set(DISTRACTOR_COLOURS)
    for scene, q in own_batch:
        w, h = scene.image.size
        for o in scene.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            assert o.mask.shape == (round(y1 * h) - round(y0 * h), round(x1 * w) - round(x0 * w))
        # a query never names a distractor by the attribute it lacks
        words = q.text.split()
        assert all(wd in QUERY_WORDS for wd in words)
        assert all((o.shape in SHAPES or words[-1] in COLOURS) and (o.colour in COLOURS or len(words) == 1 and
                                                                     words[0] in SHAPES) for o in q.matches)
    # some crowded scenes repeat one kind many times, so a query matches many copies
    assert max(len(q.matches) for _, q in own_batch) >= 10


def test_vary_wording_normalises_back():
    rng = np.random.default_rng(11)
    seen = set()
    for text in scenes.ALL_QUERIES:
        for _ in range(20):
            typed = vary_wording(rng, text)
            seen.add(typed)
            assert normalize_query(typed) == text, (typed, text)
    assert any(t != t.lower() for t in seen) and any(t.lower().startswith("the ") for t in seen)
    assert any(t.rstrip(". ").endswith("crosses") for t in seen)


def test_tilt_folds_by_symmetry():
    assert scenes.tilt("square", 0) == scenes.tilt("square", 90) == 0
    assert scenes.tilt("square", 45) == scenes.tilt("square", 135) == 45
    assert scenes.tilt("square", 350) == 10 and scenes.tilt("hexagon", 50) == 10
    assert scenes.tilt("circle", 77) == 0 and scenes.tilt("pentagon", 30) == 0


def test_a_tilted_square_is_not_a_diamond():
    """Vocabulary: a square at 45° keeps equal diagonals; a diamond's diagonals differ (DIAMOND_RATIO)."""
    sq = render_shape("square", 101, 45)
    assert abs(sq.shape[0] - sq.shape[1]) <= 1
    for ratio in scenes.DIAMOND_RATIO:
        dm = render_shape("diamond", 101, 0, aspect=ratio)
        assert dm.shape[1] / dm.shape[0] < scenes.DIAMOND_RATIO[1] + 0.03


def test_object_count_bounds():
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert len(make_scene(rng, min_objects=0, max_objects=0).objects) == 0
        assert len(make_scene(rng, min_objects=3, max_objects=3, size_range=(256, 256)).objects) == 3
    with pytest.raises(ValueError):
        make_scene(rng, min_objects=4, max_objects=2)
    with pytest.raises(ValueError):
        make_scene(rng, size_range=(8, 8))


# ------------------------------------------------------------------ queries

def _independent_matches(text: str, objects) -> list[SceneObject]:
    words = text.split()
    colours = [w for w in words if w in COLOURS]
    shapes = [w for w in words if w in SHAPES]
    assert len(colours) + len(shapes) == len(words) and len(colours) <= 1 and len(shapes) <= 1
    return [o for o in objects
            if (not colours or o.colour == colours[0]) and (not shapes or o.shape == shapes[0])]


def test_query_matches_are_correct_and_ordered(batch):
    forms = Counter()
    for scene, q in batch:
        words = q.text.split()
        assert all(wd in QUERY_WORDS for wd in words) and 1 <= len(words) <= 2
        forms[("colour " if words[0] in COLOURS else "") + ("shape" if words[-1] in SHAPES else "")] += 1
        expected = _independent_matches(q.text, scene.objects)
        assert Counter(id(o) for o in q.matches) == Counter(id(o) for o in expected)
        keys = [(min(int(o.point[1] * 8), 7), o.point[0]) for o in q.matches]
        assert keys == sorted(keys)
        assert q.matches == scenes.matches(q.text, scene.objects)
    assert set(forms) == {"shape", "colour shape", "colour "}, forms


def test_reading_order_bands():
    def obj(x, y):
        return SceneObject("circle", "red", (x - 0.01, y - 0.01, x + 0.01, y + 0.01), (x, y))
    a, b, c, d = obj(0.9, 0.05), obj(0.1, 0.10), obj(0.5, 0.30), obj(0.2, 0.99)
    # a and b share the top band, so b (further left) comes first although it sits lower.
    assert scenes.reading_order([d, c, a, b]) == (b, a, c, d)


def test_empty_queries(batch):
    empties = [q for s, q in batch if not q.matches]
    assert empties
    with_objects = [q for s, q in batch if s.objects]
    rate = sum(not q.matches for q in with_objects) / len(with_objects)
    assert 0.07 < rate < 0.25, rate
    assert all(not q.matches for s, q in batch if not s.objects)
    rng = np.random.default_rng(0)
    for _ in range(50):
        scene = make_scene(rng, min_objects=1, max_objects=10, size_range=(96, 200))
        assert make_query(rng, scene, empty_rate=0.0).matches
        q = make_query(rng, scene, empty_rate=1.0)
        assert not q.matches and not _independent_matches(q.text, scene.objects)


def test_scene_batch_kwargs():
    b = scene_batch(5, 20, min_objects=2, max_objects=4, size_range=(128, 160), empty_rate=0.0)
    for s, q in b:
        assert 128 <= min(s.image.size) and max(s.image.size) <= 160
        assert 2 <= len(s.objects) <= 4 and q.matches


def test_parse_query_rejects_unknown():
    with pytest.raises(ValueError):
        scenes.parse_query("circle red")
    with pytest.raises(ValueError):
        scenes.parse_query("giraffe")


# ------------------------------------------------------------------ speed



def test_hard_negatives_are_near_misses_and_leave_the_default_stream_alone():
    present = {("red", "circle"), ("blue", "square")}
    assert scenes.near_miss("green circle", present) and scenes.near_miss("red star", present)
    assert not scenes.near_miss("green star", present)
    assert scenes.near_miss("diamond", present) and scenes.near_miss("hexagon", present)
    assert not scenes.near_miss("cross", present) and not scenes.near_miss("green", present)
    near = plain = 0
    for seed in range(60):
        scene = make_scene(np.random.default_rng(seed), min_objects=1, max_objects=6, size_range=(96, 160))
        taken = {(o.colour, o.shape) for o in scene.objects}
        # hard_rate 0 draws nothing more: the same query as before the option existed
        a, b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
        assert make_query(a, scene, empty_rate=1.0) == make_query(b, scene, empty_rate=1.0, hard_rate=0.0)
        assert a.random() == b.random()
        q = make_query(np.random.default_rng([seed, 2]), scene, empty_rate=1.0, hard_rate=1.0)
        assert not q.matches and not _independent_matches(q.text, scene.objects)
        near += scenes.near_miss(q.text, taken)
        plain += scenes.near_miss(make_query(np.random.default_rng([seed, 2]), scene, empty_rate=1.0).text, taken)
    assert near > plain and near >= 50, (near, plain)


# ------------------------------------------------------------------ training-only variety

def test_wide_colour_ranges_contain_the_own_and_stay_apart_from_distractors():
    rng = np.random.default_rng(8)
    wide = scenes.WIDE_COLOUR_RANGES
    assert set(wide) == set(COLOURS)
    _assert_disjoint(rng, {**wide, **DISTRACTOR_COLOURS})
    for name, spec in wide.items():   # every own shade is also a wide shade of the same name
        for _ in range(100):
            assert in_range(np.rint(hsv_shade(rng, COLOUR_RANGES[name])), spec), name


def test_variety_backgrounds_keep_their_distance_and_marks_stay_small():
    rng = np.random.default_rng(6)
    kinds = Counter()
    flat_kinds = {"flat", "checker", "stripes", "dots", "grid", "confetti"}   # pixels are base colours only
    for _ in range(200):
        img, kind = scenes.background(rng, 203, 157, variety=True)
        assert img.shape == (157, 203, 3) and img.dtype == np.uint8
        kinds[kind] += 1
        if kind in flat_kinds:
            px = np.unique(img.reshape(-1, 3), axis=0).astype(np.float64)
            assert len(px) <= 3, kind
            dist = np.sqrt(((px[:, None, :] - scenes.WIDE_OBJECT_RGB[None]) ** 2).sum(-1)).min(1)
            assert dist.min() >= scenes.VARIETY_BG_DISTANCE - 1.0, (kind, px)
        if kind == "dots":   # no dot is as wide as the smallest object
            base = img[0, 0] if (img == img[0, 0]).all(-1).mean() > 0.5 else img[1, 1]
            on = ~(img == base).all(-1)
            edges = [np.flatnonzero(np.diff(np.r_[0, row, 0])) for row in on.astype(int)]   # run starts, ends
            runs = max((e[1::2] - e[0::2]).max(initial=0) for e in edges)
            assert runs <= scenes.MIN_OBJECT_PX, runs
    assert set(kinds) == set(scenes.BACKGROUNDS + scenes.VARIETY_BACKGROUNDS)


def test_variety_scenes_keep_exact_ground_truth():
    rng = np.random.default_rng(11)
    for _ in range(40):
        scene = make_scene(rng, **{**scenes.VARIETY_SCENES, "effects": False})
        _check_scene(scene, scenes.WIDE_COLOUR_RANGES)


def test_variety_is_off_in_the_own_generator():
    assert "variety" not in OWN_SCENES and scenes.VARIETY_SCENES["variety"] is True
    a = make_scene(np.random.default_rng(3), **OWN_SCENES)
    b = make_scene(np.random.default_rng(3), **OWN_SCENES, variety=False)
    assert a.image.tobytes() == b.image.tobytes() and a.background in scenes.BACKGROUNDS


def _sides(pts):
    return [float(np.hypot(x1 - x0, y1 - y0)) for (x0, y0), (x1, y1) in zip(pts, pts[1:] + pts[:1])]


@pytest.mark.parametrize("aspect", [0.35, 0.45, 0.55])
@pytest.mark.parametrize("angle", [0.0, 30.0, 45.0, 90.0])
def test_lookalike_quadrilaterals_are_never_diamonds(aspect, angle):
    """A parallelogram's and a kite's sides are clearly unequal (a diamond is a rhombus: four equal sides)."""
    for shape in ("parallelogram", "kite"):
        pts = scenes.polygon(shape, 10.0, math.radians(angle), aspect)
        sides = _sides(pts)
        assert min(sides) / max(sides) < 0.7, (shape, sides)
        assert max(float(np.hypot(x, y)) for x, y in pts) <= 10.0 + 1e-9   # inside the circumscribed circle
    sq = _sides(scenes.polygon("diamond", 10.0, math.radians(angle), 0.6))
    assert max(sq) - min(sq) < 1e-9


def test_octagon_differs_from_circle_and_hexagon():
    oc = render_shape("octagon", 80, 0)
    for other in ("circle", "hexagon"):
        ot = render_shape(other, 80, 0)
        h, w = max(oc.shape[0], ot.shape[0]), max(oc.shape[1], ot.shape[1])
        a = np.zeros((h, w), bool); a[:oc.shape[0], :oc.shape[1]] = oc
        b = np.zeros((h, w), bool); b[:ot.shape[0], :ot.shape[1]] = ot
        assert (a ^ b).sum() > 0.02 * a.sum(), other


def test_lookalikes_appear_only_when_asked():
    kw = {**scenes.VARIETY_SCENES, "effects": False}
    rng = np.random.default_rng(21)
    with_l = [make_scene(rng, **kw, lookalikes=True) for _ in range(60)]
    shapes = Counter(o.shape for s in with_l for o in s.objects)
    assert set(scenes.LOOKALIKE_SHAPES) <= set(shapes), shapes
    for scene in with_l:
        for o in scene.objects:
            assert o.shape in SHAPES + DISTRACTOR_SHAPES + scenes.LOOKALIKE_SHAPES
            assert o.known or o.shape not in SHAPES or o.colour in DISTRACTOR_COLOURS
    rng = np.random.default_rng(21)
    without = [make_scene(rng, **kw) for _ in range(60)]
    assert not {o.shape for s in without for o in s.objects} & set(scenes.LOOKALIKE_SHAPES)
    # look-alikes are outside the vocabulary, so no query names one
    assert not set(scenes.LOOKALIKE_SHAPES) & (set(SHAPES) | set(DISTRACTOR_SHAPES))


def _vertex_share(scenes_list, shape, lo, hi):
    tilts = [o.tilt for s in scenes_list for o in s.objects if o.shape == shape]
    return sum(not lo < t < hi for t in tilts) / len(tilts), len(tilts)


def test_poses_stand_diamonds_and_squares_on_a_vertex_only_when_asked():
    kw = {**scenes.VARIETY_SCENES, "effects": False, "max_objects": 12}
    posed = [make_scene(np.random.default_rng(i), **kw, poses=True) for i in range(80)]
    free = [make_scene(np.random.default_rng(i), **kw) for i in range(80)]
    s = scenes.VERTEX_POSE_SPREAD
    # diamond: tilt within `s` of 0 (upright) or of 90 (level); square: within `s` of 45 (on a corner)
    for shape, lo, hi in (("diamond", s, 90 - s), ("square", -1.0, 45 - s)):
        share, n = _vertex_share(posed, shape, lo, hi)
        base, m = _vertex_share(free, shape, lo, hi)
        assert n > 40 and m > 40
        # any rotation: 2·s / 90 of them by chance; with poses, VERTEX_POSE_P more of the rest
        assert base < 0.3 and share > 0.45, (shape, base, share)
    for scene in posed:
        _check_scene(scene, scenes.WIDE_COLOUR_RANGES)

"""Contract checks for engine/training/foreign/seventh.py (independent rule oracle)."""
import colorsys

import numpy as np
import pytest

from engine.training.foreign import seventh

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
SEED = 20240607
N = 24


@pytest.fixture(scope="module")
def batch():
    return seventh.seventh_batch(SEED, N)


def parse(text):
    parts = text.split(" ")
    if len(parts) == 2:
        assert parts[0] in COLOURS and parts[1] in SHAPES
        return parts[0], parts[1]
    assert len(parts) == 1
    if parts[0] in SHAPES:
        return None, parts[0]
    assert parts[0] in COLOURS
    return parts[0], None


def oracle(text, objects):
    colour, shape = parse(text)
    if colour and shape:
        m = [o for o in objects if o.colour == colour and o.shape == shape]
    elif shape:
        m = [o for o in objects if o.shape == shape and o.colour in COLOURS]
    else:
        m = [o for o in objects if o.colour == colour and o.shape in SHAPES]
    return tuple(sorted(m, key=lambda o: (min(int(o.point[1] * 8), 7), o.point[0])))


def colour_name(rgb):
    """Independent coarse naming of an RGB triple."""
    h, s, v = colorsys.rgb_to_hsv(*(c / 255 for c in rgb))
    h *= 360
    if v < 0.2:
        return "black"
    if s < 0.12:
        return "white" if v > 0.88 else "grey"
    if s < 0.5:
        return "pink" if (h > 320 or h < 10) and v > 0.85 else "other"
    if h >= 345 or h < 10:
        return "red"
    if 18 <= h < 36:
        return "orange" if v > 0.8 else ("brown" if v < 0.5 else "other")
    if 45 <= h < 62 and v > 0.85:
        return "yellow"
    if 95 <= h < 145:
        return "green"
    if 205 <= h < 240:
        return "blue"
    if 262 <= h < 292:
        return "purple"
    return "other"


def key(scene, query):
    return (scene.image.tobytes(), scene.image.size, scene.background, scene.objects,
            tuple(o.mask.tobytes() for o in scene.objects), query)


def test_determinism_and_index_independence(batch):
    short = seventh.seventh_batch(SEED, 5)
    for a, b in zip(short, batch[:5]):
        assert key(*a) == key(*b)
    again = seventh.seventh_batch(SEED + (1 << 63), 3)  # seed taken mod 2**63
    for a, b in zip(again, batch[:3]):
        assert key(*a) == key(*b)
    other = seventh.seventh_batch(SEED + 1, 3)
    assert all(a[0].image.tobytes() != b[0].image.tobytes() for a, b in zip(other, batch[:3]))


def test_image_and_query_contract(batch):
    forms, empties = set(), []
    for scene, query in batch:
        W, H = scene.image.size
        assert scene.image.mode == "RGB"
        assert 200 <= min(W, H) and max(W, H) <= 900 and max(W, H) / min(W, H) <= 2.5
        assert 1 <= len(scene.objects) <= 25
        assert scene.background in seventh.SETTINGS
        assert query.text == query.text.lower()
        colour, shape = parse(query.text)
        forms.add((colour is not None, shape is not None))
        assert query.matches == oracle(query.text, scene.objects)
        assert all(any(m is o for o in scene.objects) for m in query.matches)
        empties.append(len(query.matches) == 0)
        # distractor rules
        for o in scene.objects:
            if colour is None:
                assert not (o.shape == shape and o.colour not in COLOURS)
            if shape is None:
                assert not (o.colour == colour and o.shape not in SHAPES)
    assert forms == {(True, True), (False, True), (True, False)}
    assert any(empties) and not all(empties)


def test_vocabulary_exports():
    assert seventh.SHAPES == SHAPES and seventh.COLOURS == COLOURS


def test_colours_read_as_names(batch):
    for scene, _ in batch:
        for o in scene.objects:
            name = colour_name(o.rgb)
            if o.colour in COLOURS:
                assert name == o.colour, (o.colour, o.rgb, name)
            else:
                assert name not in COLOURS, (o.colour, o.rgb, name)


def test_geometry_masks_points_visibility(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        img = np.asarray(scene.image, np.float32)
        label = np.full((H, W), -1)
        full = []
        for i, o in enumerate(scene.objects):
            x0, y0, x1, y1 = o.box
            px0, py0, px1, py1 = round(x0 * W), round(y0 * H), round(x1 * W), round(y1 * H)
            assert 0 <= px0 < px1 <= W and 0 <= py0 < py1 <= H
            m = o.mask
            assert m is not None and m.dtype == bool and m.shape == (py1 - py0, px1 - px0)
            assert m[0].any() and m[-1].any() and m[:, 0].any() and m[:, -1].any()
            f = np.zeros((H, W), bool)
            f[py0:py1, px0:px1] = m
            full.append(f)
            label[f] = i
            assert 0 < o.size < 0.6 and o.size >= 0.04
            assert o.size * min(W, H) >= 12 and max(m.shape) >= 12
            assert o.tilt >= 0
            sym = {"circle": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90,
                   "hexagon": 60, "diamond": 180}.get(o.shape)
            if sym is not None:
                assert o.tilt <= sym / 2 + 1e-6
            # mask extent must fit the circumscribed diameter
            assert max(m.shape) <= o.size * min(W, H) + 3
        for i, o in enumerate(scene.objects):
            vis = label == i
            assert vis.sum() >= 0.75 * full[i].sum()
            c, r = o.point[0] * W - 0.5, o.point[1] * H - 0.5
            assert abs(c - round(c)) < 1e-6 and abs(r - round(r)) < 1e-6
            c, r = int(round(c)), int(round(r))
            assert full[i][r, c], "point outside own mask"
            assert not any(full[j][r, c] for j in range(i + 1, len(full))), "point covered by later object"
            # well inside: 3x3 neighbourhood visible and of the object's colour
            assert vis[r - 1:r + 2, c - 1:c + 2].all()
            px = np.median(img[r - 1:r + 2, c - 1:c + 2].reshape(-1, 3), 0)
            assert np.linalg.norm(px - np.array(o.rgb)) < 80, (o.colour, o.rgb, px)


def test_square_vs_diamond_geometry(batch):
    seen = set()
    for scene, _ in batch:
        short = min(scene.image.size)
        for o in scene.objects:
            r = o.size * short / 2
            if o.shape not in ("square", "diamond") or r < 10:
                continue
            ratio = o.mask.sum() / (2 * r * r)  # square: 1, diamond: short/long diagonal
            if o.shape == "square":
                assert ratio > 0.86, ratio
            else:
                assert 0.45 < ratio < 0.78, ratio
            seen.add(o.shape)
    assert seen == {"square", "diamond"}


def test_near_misses_and_distractors_present(batch):
    vocab_off = sum(o.colour not in COLOURS or o.shape not in SHAPES for s, _ in batch for o in s.objects)
    assert vocab_off > 0
    for scene, query in batch:
        if query.matches:
            continue
        colour, shape = parse(query.text)
        near = [o for o in scene.objects if (shape and o.shape == shape) or (colour and o.colour == colour)
                or o.shape in SHAPES]
        assert near

"""What the model answers for the sixth generator's diamonds (README, "A sixth generator").

    python docs/experiments/diamond_probe.py [--weights assets/model] [--n 500] [--seed 6666] [--flat N]

Detects every query of `sixth_batch(seed, n)` that names a diamond; each diamond the answer misses is
asked for again as "<colour> square", "triangle", "hexagon" and "star", and listed with its setting,
colour, size, apparent width / height and tilt, and the names under which the model does find it.

--flat N: instead, N plain images per pose, each with one flat red diamond (short / long diagonal
0.55, 0.65 or 0.72; standing on a vertex, level, or turned 30°) or one red square (upright, or on a
corner), asked for as "red diamond" and as "red square"; prints how often each name gets a box.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
from collections import Counter  # noqa: E402

from engine.training.foreign.sixth import sixth_batch  # noqa: E402
from engine.training.evaluate import greedy_match  # noqa: E402

OTHER_NAMES = ("square", "triangle", "hexagon", "star")


def _boxes(result: dict) -> list[tuple[float, float, float, float]]:
    return [(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in result.get("objects", [])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=str(ROOT / "assets" / "model"))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=6666)
    ap.add_argument("--flat", type=int, default=0, metavar="N", help="the plain-image poses instead, N images each")
    a = ap.parse_args(argv)

    from engine.serving.engine import Engine

    engine = Engine.from_pretrained(a.weights, device="cpu", dtype="auto", max_batch=16)
    if a.flat:
        return _flat(engine, a.flat)
    found, missed = 0, []
    for scene, query in sixth_batch(a.seed, a.n):
        if not any(o.shape == "diamond" for o in query.matches):
            continue
        _, hit = greedy_match(_boxes(engine.detect(scene.image, query.text)), [o.box for o in query.matches])
        for obj, ok in zip(query.matches, hit):
            if obj.shape != "diamond":
                continue
            if ok:
                found += 1
                continue
            also = [name for name in OTHER_NAMES
                    if greedy_match(_boxes(engine.detect(scene.image, f"{obj.colour} {name}")), [obj.box])[1][0]]
            w, h = scene.image.size
            ratio = (obj.box[2] - obj.box[0]) * w / ((obj.box[3] - obj.box[1]) * h)
            missed.append((scene.background, query.text, obj.colour, round(obj.size, 3), round(ratio, 2),
                           round(obj.tilt, 1), also))
    print(f"diamonds found {found}, missed {len(missed)}")
    for row in missed:
        print(row)
    print("settings:", dict(Counter(m[0] for m in missed)))
    print("found instead as:", dict(Counter(tuple(m[-1]) for m in missed)))
    print("colours:", dict(Counter(m[2] for m in missed)))
    return 0


def _flat(engine, n: int) -> int:
    import numpy as np
    from PIL import Image

    from engine.training import scenes

    rng = np.random.default_rng(0)
    poses = [("diamond", r, angle) for r in (0.55, 0.65, 0.72) for angle in (0.0, 90.0, 30.0)]
    poses += [("square", 1.0, 0.0), ("square", 1.0, 45.0)]
    print("shape    diag ratio  angle   boxes for 'red diamond'  boxes for 'red square'")
    for shape, ratio, angle in poses:
        hits = {"diamond": 0, "square": 0}
        for _ in range(n):
            img = np.empty((320, 320, 3), np.uint8)
            img[:] = np.rint(scenes.bg_colour(rng)).astype(np.uint8)
            mask = scenes.render_shape(shape, rng.uniform(60, 140), angle, ratio)
            y, x = (int(rng.integers(0, 320 - side)) for side in mask.shape)
            img[y:y + mask.shape[0], x:x + mask.shape[1]][mask] = np.clip(
                scenes.hsv_shade(rng, scenes.COLOUR_RANGES["red"]), 0, 255).astype(np.uint8)
            image = Image.fromarray(img)
            for name in hits:
                hits[name] += bool(engine.detect(image, f"red {name}")["objects"])
        print(f"{shape:8} {ratio:10.2f} {angle:6.0f}   {hits['diamond']:>10}/{n}   {hits['square']:>18}/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

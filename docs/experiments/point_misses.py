"""Where the points that miss land, on a generator (session 57's reading of the point hit rate).

    python docs/experiments/point_misses.py GENERATOR WEIGHTS [--n 500] [--near 3]

Decodes as `blind_eval.py` does (bf16, CPU, the generator's default seed) and sorts every emitted point that
hits no matching object into one of:
  near          within --near pixels of a matching object's mask (a localisation miss);
  in box        inside a matching object's box but off its mask (concave or thin shapes), not near;
  same colour   on a non-matching object of the asked colour (wrong shape);
  same shape    on a non-matching object of the asked shape (wrong colour);
  other object  on any other object;
  background    on no object (a hallucination), and of those, how many in absent queries.
Counted per query form and scene kind as well, with the commonest (asked → object pointed at) pairs, so a miss can be told from
a wrong reading.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402
from scipy import ndimage  # noqa: E402

from docs.experiments.blind_eval import GENERATORS, decode_bf16  # noqa: E402
from engine.training.evaluate import point_in_object, query_form  # noqa: E402
from engine.training.scenes import parse_query  # noqa: E402

KINDS = ("near", "in box", "same colour", "same shape", "other object", "background")


def distance_to_mask(point, obj, size) -> float:
    """Pixels from the point to the object's nearest mask pixel (0 inside)."""
    w, h = size
    col, row = point[0] * w, point[1] * h
    x0, y0 = round(obj.box[0] * w), round(obj.box[1] * h)
    ys, xs = np.nonzero(obj.mask)
    if len(ys) == 0:
        return float("inf")
    return float(np.sqrt(((xs + x0 + 0.5 - col) ** 2 + (ys + y0 + 0.5 - row) ** 2).min()))


def in_box(point, obj) -> bool:
    x0, y0, x1, y1 = obj.box
    return x0 <= point[0] <= x1 and y0 <= point[1] <= y1


def classify(point, scene, query, near: float) -> tuple[str, object]:
    """(where a missed point lands, the topmost object under it or None)."""
    size = scene.image.size
    if any(distance_to_mask(point, o, size) <= near for o in query.matches):
        return "near", None
    if any(in_box(point, o) for o in query.matches):
        return "in box", None
    colour, shape = parse_query(query.text)
    o = next((o for o in reversed(scene.objects) if point_in_object(point, o, size)), None)   # topmost
    if o is None:
        return "background", None
    if colour is not None and o.colour == colour:
        return "same colour", o
    if shape is not None and o.shape == shape:
        return "same shape", o
    return "other object", o


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("generator", choices=sorted(GENERATORS))
    ap.add_argument("weights")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--near", type=float, default=3.0)
    a = ap.parse_args(argv)
    data, answers = decode_bf16(a.generator, a.weights, a.n)
    by_form: Counter = Counter()
    by_kind: Counter = Counter()
    confused: Counter = Counter()
    emitted = hits = absent_bg = 0
    for (scene, query), points in zip(data, answers["point"]):
        for p in points:
            emitted += 1
            if any(point_in_object(p, o, scene.image.size) for o in query.matches):
                hits += 1
                continue
            k, wrong = classify(p, scene, query, a.near)
            by_form[query_form(query.text), k] += 1
            by_kind[scene.background, k] += 1
            absent_bg += k == "background" and not query.matches
            if wrong is not None:
                confused[query.text, wrong.name] += 1
    misses = emitted - hits
    print(f"{a.generator}, {a.weights}: {emitted} points, {hits} hit ({100 * hits / max(emitted, 1):.1f}%), "
          f"{misses} missed")
    kinds = Counter()
    for (_, k), n in by_form.items():
        kinds[k] += n
    for k in KINDS:
        print(f"  {k:<13} {kinds[k]:>4}  ({100 * kinds[k] / max(misses, 1):.1f}% of misses)"
              + (f", {absent_bg} in absent queries" if k == "background" else ""))
    for form in ("colour", "shape", "colour shape"):
        print(f"  form {form:<12} " + ", ".join(f"{k} {by_form[form, k]}" for k in KINDS))
    for kind in sorted({b for b, _ in by_kind}):
        print(f"  kind {kind:<12} " + ", ".join(f"{k} {by_kind[kind, k]}" for k in KINDS if by_kind[kind, k]))
    print("  most pointed-at wrong objects (asked → hit): "
          + ", ".join(f"{q} → {o} {n}" for (q, o), n in confused.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

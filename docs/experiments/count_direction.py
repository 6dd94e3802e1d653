"""Which way the detect counts go wrong on a generator, by crowd size, and how large the missed objects are
(session 56's reading of the twelfth, README "Session 56").

    python docs/experiments/count_direction.py GENERATOR WEIGHTS [--n 500]

Decodes as `blind_eval.py` does (bf16, CPU, the generator's default seed) and prints, per crowd bucket (objects in
the scene: 0-5, 6-10, 11+), how many queries got each count error (predicted - true, clipped to ±3), and the median
size (of the short side) of the matching objects found and missed by detect.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402

from docs.experiments.blind_eval import GENERATORS, decode_bf16  # noqa: E402
from engine.training.evaluate import greedy_match  # noqa: E402

BUCKETS = ((0, 6, "0-5"), (6, 11, "6-10"), (11, 10 ** 6, "11+"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("generator", choices=sorted(GENERATORS))
    ap.add_argument("weights")
    ap.add_argument("--n", type=int, default=500)
    a = ap.parse_args(argv)
    data, answers = decode_bf16(a.generator, a.weights, a.n)
    errors: Counter = Counter()
    found, missed = [], []
    for (scene, query), boxes in zip(data, answers["detect"]):
        bucket = next(name for lo, hi, name in BUCKETS if lo <= len(scene.objects) < hi)
        errors[bucket, max(-3, min(3, len(boxes) - len(query.matches)))] += 1
        _, hit = greedy_match(boxes, [o.box for o in query.matches])
        for o, h in zip(query.matches, hit):
            (found if h else missed).append(o.size)
    for _, _, name in BUCKETS:
        print(f"{name:>5} objects: count error → queries {dict((d, errors[name, d]) for d in range(-3, 4))}")
    print(f"median size found {np.median(found):.3f} ({len(found)}), missed {np.median(missed):.3f} ({len(missed)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

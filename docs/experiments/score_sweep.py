"""What a score floor does to the embedded model's detect/point answers: run every (scene, query) of a
generator once, keep each object's score, and score the answers with the objects below S left out,
for several S.

    python docs/experiments/score_sweep.py --generator own|independent|third|fourth|fifth|sixth|seventh
        --weights DIR [--n N] [--seed S] [--dtype auto|fp32|bf16] [--floors 0,0.1,0.2,0.3] [--json OUT]

Metrics as `engine.training.evaluate` computes them (its public functions); S = 0 is the engine's
answer as it is. Floors leave objects out after decoding, so every S comes from the same run.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from engine.training.evaluate import (CROWD_BUCKETS, bucket, detect_metrics, generate,  # noqa: E402
                                      point_metrics, run_requests)

BLIND = ("third", "fourth", "fifth", "sixth", "seventh")


def scenes(generator: str, seed: int | None, n: int):
    if generator in BLIND:
        from docs.experiments.blind_eval import GENERATORS

        batch, default = GENERATORS[generator]
        return batch(default if seed is None else seed, n), default if seed is None else seed
    seed = 12345 if seed is None else seed
    return generate(generator, seed, n), seed


def floor_metrics(data, det, pts, floor: float) -> dict:
    boxes = [[o for o in r.get("objects", []) if o["score"] >= floor] for r in det]
    points = [[p for p in r.get("points", []) if p["score"] >= floor] for r in pts]
    d = detect_metrics([([(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in b], [m.box for m in q.matches])
                        for b, (_, q) in zip(boxes, data)], scores=[[o["score"] for o in b] for b in boxes])
    p = point_metrics([([(o["x"], o["y"]) for o in b], q.matches, s.image.size) for b, (s, q) in zip(points, data)])
    crowded = [i for i, (s, _) in enumerate(data) if bucket(len(s.objects), CROWD_BUCKETS).endswith("+")]
    dc = detect_metrics([([(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in boxes[i]],
                          [m.box for m in data[i][1].matches]) for i in crowded],
                        scores=[[o["score"] for o in boxes[i]] for i in crowded]) if crowded else {}
    return {"floor": floor, "ap50": d["ap50"], "precision": d["precision"], "recall": d["recall"],
            "point_hit": p["hit_rate"], "point_recall": p["recall"],
            "count_detect": d["count_exact"], "count_point": p["count_exact"],
            "count_exact": (d["count_exact"] + p["count_exact"]) / 2,
            "empty_detect": d["empty_accuracy"], "empty_point": p["empty_accuracy"],
            "empty_accuracy": (d["empty_accuracy"] + p["empty_accuracy"]) / 2, "empty_queries": d["empty_queries"],
            "crowded_ap50": dc.get("ap50")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generator", required=True, choices=("own", "independent", *BLIND))
    ap.add_argument("--weights", default="assets/model")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dtype", default="bf16", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--floors", default="0,0.05,0.1,0.15,0.2,0.25,0.3,0.4")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    from engine.serving.engine import Engine

    t0 = time.perf_counter()
    data, seed = scenes(a.generator, a.seed, a.n)
    print(f"{a.n} {a.generator} scenes (seed {seed}) in {time.perf_counter() - t0:.1f}s", flush=True)
    engine = Engine.from_pretrained(a.weights, device="cpu", dtype=a.dtype, max_batch=16)
    det, _ = run_requests(engine, data, "detect")
    pts, _ = run_requests(engine, data, "point")
    rows = [floor_metrics(data, det, pts, float(f)) for f in a.floors.split(",")]
    pct = lambda v: "    —" if v is None else f"{100 * v:5.1f}"  # noqa: E731
    print(f"{a.generator}, {a.weights}, {a.dtype}: floor | AP50 | P | R | hit | count det/pt | empty det/pt | crowded AP50")
    for r in rows:
        print(f"  {r['floor']:.2f} | {pct(r['ap50'])} | {pct(r['precision'])} | {pct(r['recall'])} | {pct(r['point_hit'])} | "
              f"{pct(r['count_detect'])} {pct(r['count_point'])} | {pct(r['empty_detect'])} {pct(r['empty_point'])} | "
              f"{pct(r['crowded_ap50'])}")
    if a.json:
        scores = {"detect": [[o["score"] for o in r.get("objects", [])] for r in det],
                  "point": [[o["score"] for o in r.get("points", [])] for r in pts],
                  "expected": [len(q.matches) for _, q in data]}
        Path(a.json).write_text(json.dumps({"generator": a.generator, "seed": seed, "n": a.n, "weights": a.weights,
                                            "dtype": a.dtype, "rows": rows, "scores": scores}) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

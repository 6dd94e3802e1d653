"""Evaluate a checkpoint on held-out synthetic scenes through the real engine.

    python -m engine.evaluate [--weights DIR] [--n 500] [--seed 12345] [--max-batch 16]
                              [--latency-runs 30] [--threads 2] [--json PATH]

The set is `engine.training.scenes.scene_batch(seed, n)` — the generator's default distribution, the one
training draws from, but another seed (training uses seeds [train_seed, batch, image]; this uses
[seed, i], so the scenes differ). Every (scene, query) is asked once as detect and once as
point; all requests go to one Engine (max_batch 16) and are collected at the end.

Metrics (pure functions below, tested in tests/test_evaluate.py):

* detect AP50: the model emits no scores, so predictions are ranked by emission order — every
  query's 1st object, then every query's 2nd, … (ties by query index). In that order each
  prediction takes the unmatched ground-truth box of its query with the highest IoU ≥ 0.5
  (COCO's greedy rule); AP is COCO's 101-point interpolated area under precision/recall, all
  queries pooled as one class. Precision and recall at the operating point (all predictions)
  are reported too: an extra low-ranked box can leave AP at 1.0 but lowers precision.
* detect mean IoU: mean IoU of the pairs of a one-to-one matching per query (greedy by largest
  IoU, any overlap > 0), so it measures localisation of the boxes that found their object.
* point hit rate: share of predicted points that fall inside the pixel mask of an object the
  query matches (SceneObject.mask, the shape's full pixels, its box on the pixel grid). Point
  recall: share of matching objects that receive a hit (one point per object, greedy in
  emission order).
* count exact: share of queries whose number of predictions equals the number of matches
  (per skill, and both skills together).
* empty-query accuracy: among queries that match nothing, the share answered with no object.
* latency: one detect per image with a max_batch=1 engine and `--threads` torch threads,
  wall time from submit (image conversion and cropping included) to result; median over
  `--latency-runs` images after warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

Box = tuple[float, float, float, float]

TARGETS = {"detect_ap50": 0.90, "point_hit_rate": 0.95, "count_exact": 0.90, "latency_ms_median": 150.0}


# --------------------------------------------------------------------------------------------
# Metric functions
# --------------------------------------------------------------------------------------------

def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def greedy_tp(pred: Sequence[Box], gt: Sequence[Box], threshold: float = 0.5) -> list[bool]:
    """COCO matching within one query: predictions in order, each takes the unmatched ground
    truth with the highest IoU ≥ threshold. Returns a true-positive flag per prediction."""
    taken = [False] * len(gt)
    flags = []
    for p in pred:
        best, best_iou = -1, threshold
        for j, g in enumerate(gt):
            if not taken[j]:
                iou = box_iou(p, g)
                if iou >= best_iou:
                    best, best_iou = j, iou
        if best >= 0:
            taken[best] = True
        flags.append(best >= 0)
    return flags


def average_precision(ranked_tp: Sequence[bool], n_gt: int) -> float | None:
    """COCO 101-point interpolated AP of predictions already in rank order; None without ground truth."""
    if n_gt == 0:
        return None
    if not ranked_tp:
        return 0.0
    tp = np.cumsum(np.asarray(ranked_tp, dtype=np.float64))
    fp = np.cumsum(~np.asarray(ranked_tp, dtype=bool))
    recall = tp / n_gt
    precision = tp / (tp + fp)
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    # as pycocotools: precision at the first rank reaching each of 101 recall thresholds
    idx = np.searchsorted(recall, np.linspace(0.0, 1.0, 101), side="left")
    return float(np.mean([envelope[i] if i < len(envelope) else 0.0 for i in idx]))


def best_iou_pairs(pred: Sequence[Box], gt: Sequence[Box]) -> list[float]:
    """IoUs of a one-to-one matching, greedy by largest IoU (pairs with IoU > 0 only)."""
    pairs = sorted(((box_iou(p, g), i, j) for i, p in enumerate(pred) for j, g in enumerate(gt)), reverse=True)
    used_p, used_g, out = set(), set(), []
    for iou, i, j in pairs:
        if iou <= 0:
            break
        if i not in used_p and j not in used_g:
            used_p.add(i)
            used_g.add(j)
            out.append(iou)
    return out


def _count_metrics(pairs: Sequence[tuple[int, int]]) -> dict:
    """pairs: (number predicted, number expected) per query."""
    exact = [p == g for p, g in pairs]
    empty = [p == 0 for p, g in pairs if g == 0]
    return {"count_exact": float(np.mean(exact)) if exact else None,
            "empty_accuracy": float(np.mean(empty)) if empty else None, "empty_queries": len(empty)}


def detect_metrics(items: Sequence[tuple[Sequence[Box], Sequence[Box]]], threshold: float = 0.5) -> dict:
    """items: per query (predicted boxes in emission order, ground-truth boxes)."""
    ranked, ious = [], []
    n_gt = n_pred = 0
    for q, (pred, gt) in enumerate(items):
        for rank, flag in enumerate(greedy_tp(pred, gt, threshold)):
            ranked.append((rank, q, flag))
        ious += best_iou_pairs(pred, gt)
        n_gt += len(gt)
        n_pred += len(pred)
    ranked.sort(key=lambda r: (r[0], r[1]))
    flags = [f for _, _, f in ranked]
    tp = sum(flags)
    return {
        "queries": len(items), "predictions": n_pred, "ground_truth": n_gt,
        "ap50": average_precision(flags, n_gt),
        "precision": tp / n_pred if n_pred else None,
        "recall": tp / n_gt if n_gt else None,
        "mean_iou": float(np.mean(ious)) if ious else None,
        **_count_metrics([(len(p), len(g)) for p, g in items]),
    }


def point_in_object(point: Sequence[float], obj, image_size: tuple[int, int]) -> bool:
    """Does a normalised (x, y) fall on one of the object's pixels? (mask over its pixel box)"""
    w, h = image_size
    col, row = int(np.floor(point[0] * w)), int(np.floor(point[1] * h))
    x0, y0 = int(round(obj.box[0] * w)), int(round(obj.box[1] * h))
    mask = obj.mask
    r, c = row - y0, col - x0
    return 0 <= r < mask.shape[0] and 0 <= c < mask.shape[1] and bool(mask[r, c])


def point_metrics(items: Sequence[tuple[Sequence[Sequence[float]], Sequence, tuple[int, int]]]) -> dict:
    """items: per query (predicted points in emission order, matching SceneObjects, image (W, H))."""
    hits = n_pred = n_gt = found = 0
    for pred, objects, size in items:
        taken = [False] * len(objects)
        for pt in pred:
            inside = [j for j, o in enumerate(objects) if point_in_object(pt, o, size)]
            hits += bool(inside)
            free = [j for j in inside if not taken[j]]
            if free:
                taken[free[0]] = True
        found += sum(taken)
        n_pred += len(pred)
        n_gt += len(objects)
    return {
        "queries": len(items), "predictions": n_pred, "ground_truth": n_gt,
        "hit_rate": hits / n_pred if n_pred else None,
        "recall": found / n_gt if n_gt else None,
        **_count_metrics([(len(p), len(o)) for p, o, _ in items]),
    }


# --------------------------------------------------------------------------------------------
# Running the engine
# --------------------------------------------------------------------------------------------

def _boxes(result: dict) -> list[Box]:
    return [(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in result.get("objects", [])]


def _points(result: dict) -> list[tuple[float, float]]:
    return [(p["x"], p["y"]) for p in result.get("points", [])]


def run_requests(engine, data, skill: str, chunk: int = 256) -> tuple[list[dict], int]:
    """Submit every (scene, query) for `skill` (in chunks below the engine's queue limit), collect."""
    results, errors = [], 0
    for start in range(0, len(data), chunk):
        handles = [engine.submit(scene.image, skill, query.text) for scene, query in data[start:start + chunk]]
        for h in handles:
            try:
                results.append(h.result())
            except Exception as e:  # a failed request counts as an empty answer
                errors += 1
                results.append({"error": str(e)})
    return results, errors


def measure_latency(weights, data, runs: int, threads: int, warmup: int = 3) -> dict:
    from engine.serving.engine import Engine

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        engine = Engine.from_pretrained(weights, device="cpu", dtype="fp32", max_batch=1)
        for scene, query in data[len(data) - warmup:]:
            engine.detect(scene.image, query.text)
        times = []
        for scene, query in data[:runs]:
            t0 = time.perf_counter()
            engine.detect(scene.image, query.text)
            times.append(1000 * (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(before)
    return {"threads": threads, "runs": len(times), "median_ms": statistics.median(times),
            "p90_ms": float(np.percentile(times, 90)), "mean_ms": statistics.fmean(times)}


def evaluate(weights: str | Path | None, n: int = 500, seed: int = 12345, max_batch: int = 16,
             latency_runs: int = 30, threads: int = 2, quiet: bool = False) -> dict:
    from engine.serving.engine import DEFAULT_WEIGHTS, Engine
    from engine.training.scenes import scene_batch

    weights = Path(weights) if weights is not None else DEFAULT_WEIGHTS
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    t0 = time.perf_counter()
    data = scene_batch(seed, n)
    say(f"evaluate: {weights} on {n} scenes (seed {seed}), generated in {time.perf_counter() - t0:.1f}s")
    engine = Engine.from_pretrained(weights, device="cpu", dtype="fp32", max_batch=max_batch)
    report: dict = {"weights": str(weights), "n": n, "seed": seed, "max_batch": max_batch}
    for skill in ("detect", "point"):
        t0 = time.perf_counter()
        results, errors = run_requests(engine, data, skill)
        dt = time.perf_counter() - t0
        if skill == "detect":
            m = detect_metrics([(_boxes(r), [o.box for o in q.matches]) for r, (_, q) in zip(results, data)])
        else:
            m = point_metrics([(_points(r), q.matches, s.image.size) for r, (s, q) in zip(results, data)])
        m.update(errors=errors, seconds=round(dt, 2), requests_per_s=round(n / dt, 1))
        report[skill] = m
        say(f"  {skill}: {n} requests in {dt:.1f}s ({n / dt:.1f}/s), {errors} errors")
    both = [report["detect"]["count_exact"], report["point"]["count_exact"]]
    report["count_exact"] = float(np.mean(both))
    if latency_runs > 0:
        report["latency"] = measure_latency(weights, data, min(latency_runs, n), threads)
    report["targets"] = check_targets(report)
    return report


def check_targets(report: dict) -> dict:
    values = {"detect_ap50": report["detect"]["ap50"], "point_hit_rate": report["point"]["hit_rate"],
              "count_exact": report["count_exact"],
              "latency_ms_median": report.get("latency", {}).get("median_ms")}
    out = {}
    for key, target in TARGETS.items():
        v = values[key]
        ok = None if v is None else (v <= target if key.startswith("latency") else v >= target)
        out[key] = {"value": v, "target": target, "met": ok}
    return out


def format_table(report: dict) -> str:
    def f(v, pct=True):
        return "—" if v is None else (f"{100 * v:6.1f}%" if pct else f"{v:7.1f}")

    d, p = report["detect"], report["point"]
    lines = [
        f"{'metric':<28}{'detect':>10}{'point':>10}",
        f"{'AP50':<28}{f(d['ap50']):>10}{'':>10}",
        f"{'precision / hit rate':<28}{f(d['precision']):>10}{f(p['hit_rate']):>10}",
        f"{'recall':<28}{f(d['recall']):>10}{f(p['recall']):>10}",
        f"{'mean IoU (matched)':<28}{f(d['mean_iou']):>10}{'':>10}",
        f"{'count exact':<28}{f(d['count_exact']):>10}{f(p['count_exact']):>10}",
        f"{'empty-query accuracy':<28}{f(d['empty_accuracy']):>10}{f(p['empty_accuracy']):>10}",
        f"{'predictions / ground truth':<28}{d['predictions']:>5}/{d['ground_truth']:<4}{p['predictions']:>5}/{p['ground_truth']:<4}",
        f"{'errors':<28}{d['errors']:>10}{p['errors']:>10}",
    ]
    if "latency" in report:
        lat = report["latency"]
        lines.append(f"latency, one detect ({lat['threads']} threads, max_batch 1): median {lat['median_ms']:.1f} ms, "
                     f"p90 {lat['p90_ms']:.1f} ms over {lat['runs']} images")
    lines.append("targets: " + ", ".join(
        f"{k} {'—' if t['value'] is None else round(t['value'], 3)} {'✓' if t['met'] else '✗'} (target {t['target']})"
        for k, t in report["targets"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.evaluate", description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=None, help="checkpoint directory (default: the embedded model in assets/)")
    ap.add_argument("--n", type=int, default=500, help="number of (scene, query) pairs")
    ap.add_argument("--seed", type=int, default=12345, help="held-out scene seed (training uses its own seed)")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--latency-runs", type=int, default=30, help="detect requests timed with a max_batch=1 engine (0: skip)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the latency measurement")
    ap.add_argument("--json", default=None, help="where to write the report (default: WEIGHTS/eval.json)")
    a = ap.parse_args(argv)
    report = evaluate(a.weights, n=a.n, seed=a.seed, max_batch=a.max_batch, latency_runs=a.latency_runs, threads=a.threads)
    print(format_table(report))
    path = Path(a.json) if a.json else Path(report["weights"]) / "eval.json"
    try:
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    except OSError as e:
        print(f"could not write {path}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

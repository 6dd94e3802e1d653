"""Evaluate a checkpoint on held-out synthetic scenes through the real engine.

    python -m engine.evaluate [--generator own|independent] [--weights DIR] [--n 500] [--seed 12345]
                              [--max-batch 16] [--latency-runs 30] [--threads 2] [--json PATH]
                              [--qa N] [--qa-only] [--device cpu|cuda] [--dtype auto|fp32|bf16]
                              [--engine FIELD=VALUE ...]

`--generator own` (default): `engine.training.scenes.scene_batch(seed, n, **OWN_SCENES)` — the
distribution training draws from, but another seed (training uses seeds [train_seed, batch,
image]; this uses [seed, i], so the scenes differ). `--generator independent`:
`engine.training.independent_scenes.independent_batch(seed, n)`, scenes drawn by separate code
that training never sees, queries typed with capitals, plurals and articles. Every (scene,
query) is asked once as detect and once as point; all requests go to one Engine (max_batch 16)
and are collected at the end. The report is printed; it is written only where `--json` says.

Metrics (pure functions below, tested in tests/test_evaluate.py):

* detect AP50: predictions are ranked by the score the engine gives each object
  (`skills.object_score`, the model's own probabilities), highest first, as COCO ranks detections;
  ties (and every box, when no scores are given) by emission order: every query's 1st object,
  then every query's 2nd, …, then by query index. Within a query, in that order, each prediction takes the
  unmatched ground-truth box with the highest IoU ≥ 0.5 (COCO's greedy rule); AP is COCO's
  101-point interpolated area under precision/recall, all queries pooled as one class.
  `ap50_emission_order` ranks by emission order alone (the yardstick of earlier reports).
  Precision and recall at the operating point (all predictions) are reported too: an extra
  low-ranked box can leave AP at 1.0 but lowers precision.
* detect mean IoU: mean IoU of the pairs of a one-to-one matching per query (greedy by largest
  IoU, any overlap > 0), so it measures localisation of the boxes that found their object.
* point hit rate: share of predicted points that fall inside the pixel mask of an object the
  query matches (SceneObject.mask, the shape's full pixels, its box on the pixel grid). Point
  recall: share of matching objects that receive a hit (one point per object, greedy in
  emission order).
* count exact: share of queries whose number of predictions equals the number of matches
  (per skill, and both skills together).
* empty-query accuracy: among queries that match nothing, the share answered with no object.
* breakdowns: detect / point recall of the matching objects by tilt (degrees from the shape's
  upright pose), by size (circumscribed diameter / short side) and by shape; all metrics by
  crowd size (objects in the scene, distractors included), by query form and by background.
* questions and captions (`--qa N`, on N held-out scenes of the own generator, seed `--seed`):
  every question kind of `engine.training.qa` that the scene can be asked about, once each, with
  wording drawn from the training templates by rng [seed, i, 7], and a caption (short or normal);
  all through the public `Engine.submit(image, "query" | "caption", …)` (greedy, free text; a
  query may write QA_MAX_TOKENS["query"] tokens, a caption QA_MAX_TOKENS["caption"]). Accuracy per
  kind (`score_answer`): count — the stated number equals the true count (digits or number words:
  "3" = "three"); yes/no and colour — the one word after lower-casing and stripping spaces and
  punctuation; which / list — the set of shapes / "colour shape" names equals the canonical set
  (order, plurals and separators free; "none" must be said as such); caption — the set of
  (colour, shape) kinds named equals the scene's vocabulary kinds (an empty scene: it names none
  and says "no shapes"); caption_counts additionally needs every kind's count right.
* latency: one detect per image with a max_batch=1 CPU engine and `--threads` torch threads, in
  `--dtype` (auto: bf16 on a CPU with native bf16, else fp32, as the UI and CLI run), wall time
  from submit (image conversion and cropping included) to result; median over `--latency-runs`
  images after warm-up.
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

QA_TARGETS = {"count": 0.90, "yes_no": 0.97, "colour": 0.95, "caption": 0.85}
QA_MAX_TOKENS = {"query": 64, "caption": 160}    # room for the longest canonical caption (tests/test_qa.py)
QA_EXAMPLES = 5                                 # failures kept per kind in the report
TARGETS = {"detect_ap50": 0.90, "point_hit_rate": 0.95, "count_exact": 0.90, "empty_accuracy": 0.97,
           "crowded_ap50": 0.80, "recall_size_4pct": 0.90, "latency_ms_median": 100.0}
GENERATORS = ("own", "independent")
TILT_BUCKETS = (0.0, 10.0, 20.0, 30.0)          # lower edges, degrees
SIZE_BUCKETS = (0.0, 0.04, 0.10, 0.20)          # lower edges, fraction of the short side
CROWD_BUCKETS = (0, 6, 11)                      # lower edges, objects in the scene


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
    return greedy_match(pred, gt, threshold)[0]


def greedy_match(pred: Sequence[Box], gt: Sequence[Box], threshold: float = 0.5) -> tuple[list[bool], list[bool]]:
    """`greedy_tp`'s matching: (true-positive flag per prediction, found flag per ground truth)."""
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
    return flags, taken


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


def detect_metrics(items: Sequence[tuple[Sequence[Box], Sequence[Box]]], threshold: float = 0.5,
                   scores: Sequence[Sequence[float]] | None = None) -> dict:
    """items: per query (predicted boxes in emission order, ground-truth boxes); scores: per query,
    one per predicted box (None: rank by emission order alone)."""
    ious = []
    n_gt = n_pred = 0
    by_score, by_emission = [], []
    for q, (pred, gt) in enumerate(items):
        score = [1.0] * len(pred) if scores is None else list(scores[q])
        assert len(score) == len(pred), "one score per predicted box"
        order = sorted(range(len(pred)), key=lambda i: (-score[i], i))  # the query's boxes, best first
        for i, flag in zip(order, greedy_tp([pred[i] for i in order], gt, threshold)):
            by_score.append((-score[i], i, q, flag))
        for rank, flag in enumerate(greedy_tp(pred, gt, threshold)):
            by_emission.append((rank, q, flag))
        ious += best_iou_pairs(pred, gt)
        n_gt += len(gt)
        n_pred += len(pred)
    by_score.sort(key=lambda r: r[:3])
    by_emission.sort(key=lambda r: r[:2])
    flags = [r[-1] for r in by_score]
    tp = sum(flags)
    return {
        "queries": len(items), "predictions": n_pred, "ground_truth": n_gt,
        "ap50": average_precision(flags, n_gt),
        "ap50_emission_order": average_precision([r[-1] for r in by_emission], n_gt),
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


def point_match(pred: Sequence[Sequence[float]], objects: Sequence, size: tuple[int, int]) -> tuple[int, list[bool]]:
    """(points that hit a matching object, found flag per object: one point per object, greedy)."""
    hits, taken = 0, [False] * len(objects)
    for pt in pred:
        inside = [j for j, o in enumerate(objects) if point_in_object(pt, o, size)]
        hits += bool(inside)
        free = [j for j in inside if not taken[j]]
        if free:
            taken[free[0]] = True
    return hits, taken


def point_metrics(items: Sequence[tuple[Sequence[Sequence[float]], Sequence, tuple[int, int]]]) -> dict:
    """items: per query (predicted points in emission order, matching SceneObjects, image (W, H))."""
    hits = n_pred = n_gt = found = 0
    for pred, objects, size in items:
        h, taken = point_match(pred, objects, size)
        hits += h
        found += sum(taken)
        n_pred += len(pred)
        n_gt += len(objects)
    return {
        "queries": len(items), "predictions": n_pred, "ground_truth": n_gt,
        "hit_rate": hits / n_pred if n_pred else None,
        "recall": found / n_gt if n_gt else None,
        **_count_metrics([(len(p), len(o)) for p, o, _ in items]),
    }


def score_answer(kind: str, predicted: str, canonical: str) -> bool:
    """Is a predicted answer right, read as leniently as a user would (see the module docstring)?"""
    from engine.training import qa as Q

    if kind == "count":
        return Q.parse_count(predicted) == int(canonical)
    if kind in ("yes_no", "colour"):
        return Q.parse_word(predicted) == canonical
    if kind in ("which", "list"):
        if canonical == Q.NONE:
            return Q.parse_word(predicted) == Q.NONE
        return Q.parse_list(predicted) == Q.parse_list(canonical)
    if kind in ("caption", "caption_counts"):
        named, truth = Q.named_objects(predicted), Q.named_objects(canonical)
        if not truth:
            return not named and Q.EMPTY_CAPTION in Q.parse_word(predicted)
        return named == truth if kind == "caption_counts" else named.keys() == truth.keys()
    raise ValueError(f"unknown question kind {kind!r}")


def qa_metrics(items) -> dict:
    """items: (kind, predicted text, canonical answer). Accuracy per kind (captions also with counts)."""
    table: dict[str, dict] = {}
    for kind, predicted, canonical in items:
        for k in (kind, "caption_counts") if kind == "caption" else (kind,):
            row = table.setdefault(k, {"asked": 0, "right": 0, "failures": []})
            row["asked"] += 1
            ok = predicted is not None and score_answer(k, predicted, canonical)
            row["right"] += ok
            if not ok and len(row["failures"]) < QA_EXAMPLES:
                row["failures"].append({"expected": canonical, "got": predicted})
    return {k: {"asked": v["asked"], "accuracy": v["right"] / v["asked"], "failures": v["failures"]}
            for k, v in table.items()}


def run_qa(engine, seed: int, n: int, chunk: int = 128) -> dict:
    """Every question kind (`qa_suite`) on n held-out own-generator scenes."""
    from engine.training.qa import qa_suite
    from engine.training.scenes import OWN_SCENES, make_scene

    t0 = time.perf_counter()
    items = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        scene = make_scene(rng, **OWN_SCENES)
        qrng = np.random.default_rng([seed, i, 7])
        items += [(scene, qa) for qa in qa_suite(qrng, scene)]
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    out, errors = [], 0
    for start in range(0, len(items), chunk):
        handles = []
        for scene, qa in items[start:start + chunk]:
            if qa.question is None:
                handles.append(engine.submit(scene.image, "caption", length=qa.length, max_tokens=QA_MAX_TOKENS["caption"]))
            else:
                handles.append(engine.submit(scene.image, "query", qa.question, max_tokens=QA_MAX_TOKENS["query"]))
        for (scene, qa), h in zip(items[start:start + chunk], handles):
            try:
                r = h.result()
                out.append((qa.kind, r["caption"] if qa.question is None else r["answer"], qa.answer))
            except Exception:  # a failed request counts as a wrong answer
                errors += 1
                out.append((qa.kind, None, qa.answer))
    dt = time.perf_counter() - t0
    per_kind = qa_metrics(out)
    targets = {k: {"value": per_kind.get(k, {}).get("accuracy"), "target": t,
                   "met": None if k not in per_kind else per_kind[k]["accuracy"] >= t} for k, t in QA_TARGETS.items()}
    return {"scenes": n, "seed": seed, "requests": len(items), "errors": errors, "seconds": round(dt, 1),
            "generate_seconds": round(t_gen, 1), "requests_per_s": round(len(items) / max(dt, 1e-9), 1),
            "per_kind": per_kind, "targets": targets}


# --------------------------------------------------------------------------------------------
# Running the engine
# --------------------------------------------------------------------------------------------

def _boxes(result: dict) -> list[Box]:
    return [(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in result.get("objects", [])]


def _scores(result: dict) -> list[float]:
    return [o["score"] for o in result.get("objects", [])]


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


def measure_latency(weights, data, runs: int, threads: int, warmup: int = 3, dtype: str = "auto") -> dict:
    from engine.serving.engine import Engine

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        engine = Engine.from_pretrained(weights, device="cpu", dtype=dtype, max_batch=1)
        for scene, query in data[len(data) - warmup:]:
            engine.detect(scene.image, query.text)
        times = []
        for scene, query in data[:runs]:
            t0 = time.perf_counter()
            engine.detect(scene.image, query.text)
            times.append(1000 * (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(before)
    return {"threads": threads, "dtype": engine.model_info.dtype, "runs": len(times),
            "median_ms": statistics.median(times),
            "p90_ms": float(np.percentile(times, 90)), "mean_ms": statistics.fmean(times)}


def bucket(value: float, edges: Sequence[float]) -> str:
    """Label of the bucket [edge_i, edge_i+1) holding value ("20+" for the last)."""
    i = max(k for k, e in enumerate(edges) if value >= e)
    return f"{edges[i]:g}-{edges[i + 1]:g}" if i + 1 < len(edges) else f"{edges[i]:g}+"


def query_form(text: str) -> str:
    from engine.serving.skills import normalize_query
    from engine.training.scenes import COLOURS

    words = normalize_query(text).split()
    return "colour shape" if len(words) == 2 else "colour" if words[0] in COLOURS else "shape"


def breakdowns(data, det: list[list[Box]], pts: list[list[tuple[float, float]]],
               det_scores: list[list[float]] | None = None) -> dict:
    """Per-object recall by tilt / size / shape, and all metrics by crowd, query form and background
    (detect AP ranked by `det_scores` where given, as `detect_metrics`)."""
    recall: dict[str, dict[str, list[int]]] = {"tilt": {}, "size": {}, "shape": {}}
    for (scene, query), boxes, points in zip(data, det, pts):
        _, found_d = greedy_match(boxes, [o.box for o in query.matches])
        _, found_p = point_match(points, query.matches, scene.image.size)
        for o, fd, fp in zip(query.matches, found_d, found_p):
            for key, label in (("tilt", bucket(o.tilt, TILT_BUCKETS)), ("size", bucket(o.size, SIZE_BUCKETS)),
                               ("shape", o.shape)):
                c = recall[key].setdefault(label, [0, 0, 0])
                c[0] += 1
                c[1] += fd
                c[2] += fp
    out: dict = {key: {label: {"objects": n, "detect_recall": d / n, "point_recall": p / n}
                       for label, (n, d, p) in sorted(table.items())} for key, table in recall.items()}
    big = [c for label, c in recall["size"].items() if not label.startswith("0-")]
    n_big = sum(c[0] for c in big)
    out["size_4pct_up"] = {"objects": n_big, "detect_recall": sum(c[1] for c in big) / n_big if n_big else None,
                           "point_recall": sum(c[2] for c in big) / n_big if n_big else None}
    for key, label_of in (("crowd", lambda s, q: bucket(len(s.objects), CROWD_BUCKETS)),
                          ("form", lambda s, q: query_form(q.text)), ("background", lambda s, q: s.background)):
        groups: dict[str, list[int]] = {}
        for i, (scene, query) in enumerate(data):
            groups.setdefault(label_of(scene, query), []).append(i)
        out[key] = {}
        for label, idx in sorted(groups.items()):
            dm, pm = subset_metrics(data, det, pts, det_scores, idx)
            out[key][label] = {"queries": len(idx), "detect_ap50": dm["ap50"], "detect_precision": dm["precision"],
                               "detect_recall": dm["recall"], "detect_count_exact": dm["count_exact"],
                               "point_hit_rate": pm["hit_rate"], "point_recall": pm["recall"],
                               "empty_accuracy": mean_of(dm["empty_accuracy"], pm["empty_accuracy"])}
    return out


def subset_metrics(data, det, pts, det_scores, idx) -> tuple[dict, dict]:
    """(detect_metrics, point_metrics) over the queries data[i] for i in idx, from per-query answers."""
    dm = detect_metrics([(det[i], [o.box for o in data[i][1].matches]) for i in idx],
                        scores=None if det_scores is None else [det_scores[i] for i in idx])
    pm = point_metrics([(pts[i], data[i][1].matches, data[i][0].image.size) for i in idx])
    return dm, pm


def mean_of(*values):
    """The mean of the values that are not None (None if all are)."""
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def generate(generator: str, seed: int, n: int):
    """The (scene, query) pairs of a generator: "own" (training's distribution) or "independent"."""
    if generator == "own":
        from engine.training.scenes import OWN_SCENES, scene_batch

        return scene_batch(seed, n, **OWN_SCENES)
    if generator == "independent":
        from engine.training.independent_scenes import independent_batch

        return independent_batch(seed, n)
    raise ValueError(f"unknown generator {generator!r}; choose one of {', '.join(GENERATORS)}")


def score_objects(engine, data, say=lambda *a: None) -> tuple[dict, dict]:
    """Run detect and point for every (scene, query) of `data` through `engine` and score the answers.

    Returns (metrics, answers): metrics holds the report's "detect", "point", "count_exact",
    "empty_accuracy" and "breakdowns"; answers holds per query the detect boxes ("detect"), their
    scores ("scores") and the points ("point"), for breakdowns of the caller's own."""
    n = len(data)
    report: dict = {}
    answers: dict = {}
    for skill in ("detect", "point"):
        t0 = time.perf_counter()
        results, errors = run_requests(engine, data, skill)
        dt = time.perf_counter() - t0
        if skill == "detect":
            answers[skill] = [_boxes(r) for r in results]
            answers["scores"] = [_scores(r) for r in results]
            m = detect_metrics([(b, [o.box for o in q.matches]) for b, (_, q) in zip(answers[skill], data)],
                               scores=answers["scores"])
        else:
            answers[skill] = [_points(r) for r in results]
            m = point_metrics([(p, q.matches, s.image.size) for p, (s, q) in zip(answers[skill], data)])
        m.update(errors=errors, seconds=round(dt, 2), requests_per_s=round(n / dt, 1))
        report[skill] = m
        say(f"  {skill}: {n} requests in {dt:.1f}s ({n / dt:.1f}/s), {errors} errors")
    both = [report["detect"]["count_exact"], report["point"]["count_exact"]]
    report["count_exact"] = float(np.mean(both))
    report["empty_accuracy"] = mean_of(report["detect"]["empty_accuracy"], report["point"]["empty_accuracy"])
    report["breakdowns"] = breakdowns(data, answers["detect"], answers["point"], answers["scores"])
    return report, answers


def evaluate(weights: str | Path | None, n: int = 500, seed: int = 12345, max_batch: int = 16,
             latency_runs: int = 30, threads: int = 2, quiet: bool = False, generator: str = "own",
             qa: int = 0, objects: bool = True, device: str = "cpu", engine_options: dict | None = None,
             dtype: str = "auto") -> dict:
    """`engine_options`: EngineConfig fields for the evaluated engine (e.g. {"kernels": "torch"}):
    its outputs must not depend on them, so a metric that moves with one is an engine bug."""
    from engine.serving.engine import DEFAULT_WEIGHTS, Engine

    weights = Path(weights) if weights is not None else DEFAULT_WEIGHTS
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    options = dict(engine_options or {})
    engine = Engine.from_pretrained(weights, device=device, dtype=dtype, max_batch=max_batch, **options)
    report: dict = {"weights": str(weights), "generator": generator, "n": n, "seed": seed, "max_batch": max_batch,
                    "device": device, "dtype": engine.model_info.dtype,
                    **({"engine_options": options} if options else {})}
    if qa:
        report["qa"] = run_qa(engine, seed, qa)
        say(f"  questions and captions: {report['qa']['requests']} requests on {qa} own scenes in "
            f"{report['qa']['seconds']:.1f}s ({report['qa']['requests_per_s']}/s), {report['qa']['errors']} errors")
    if not objects:
        return report
    t0 = time.perf_counter()
    data = generate(generator, seed, n)
    say(f"evaluate: {weights} ({device}, {report['dtype']}) on {n} {generator} scenes (seed {seed}), "
        f"generated in {time.perf_counter() - t0:.1f}s")
    report.update(score_objects(engine, data, say)[0])
    if latency_runs > 0:
        report["latency"] = measure_latency(weights, data, min(latency_runs, n), threads, dtype=dtype)
    report["targets"] = check_targets(report)
    return report


def check_targets(report: dict) -> dict:
    crowd = report.get("breakdowns", {}).get("crowd", {}).get(f"{CROWD_BUCKETS[-1]}+", {})
    values = {"detect_ap50": report["detect"]["ap50"], "point_hit_rate": report["point"]["hit_rate"],
              "count_exact": report["count_exact"], "empty_accuracy": report.get("empty_accuracy"),
              "crowded_ap50": crowd.get("detect_ap50"),
              "recall_size_4pct": report.get("breakdowns", {}).get("size_4pct_up", {}).get("detect_recall"),
              "latency_ms_median": report.get("latency", {}).get("median_ms")}
    out = {}
    for key, target in TARGETS.items():
        v = values[key]
        ok = None if v is None else (v <= target if key.startswith("latency") else v >= target)
        out[key] = {"value": v, "target": target, "met": ok}
    return out


def format_qa_table(qa: dict) -> str:
    lines = [f"questions and captions on {qa['scenes']} own scenes (seed {qa['seed']}), {qa['requests']} requests, "
             f"{qa['errors']} errors, {qa['seconds']:.1f}s",
             f"{'kind':<16}{'asked':>7}{'accuracy':>10}{'target':>9}"]
    for kind, row in qa["per_kind"].items():
        target = qa["targets"].get(kind)
        mark = "" if target is None else f"{100 * target['target']:.0f}% {'✓' if target['met'] else '✗'}"
        lines.append(f"{kind:<16}{row['asked']:>7}{100 * row['accuracy']:>9.1f}%{mark:>9}")
    return "\n".join(lines)


def format_table(report: dict) -> str:
    def f(v, pct=True):
        return "—" if v is None else (f"{100 * v:6.1f}%" if pct else f"{v:7.1f}")

    if "detect" not in report:
        return format_qa_table(report["qa"])
    d, p = report["detect"], report["point"]
    lines = [
        f"{'metric':<28}{'detect':>10}{'point':>10}",
        f"{'AP50 (ranked by score)':<28}{f(d['ap50']):>10}{'':>10}",
        f"{'AP50 (by emission order)':<28}{f(d.get('ap50_emission_order')):>10}{'':>10}",
        f"{'precision / hit rate':<28}{f(d['precision']):>10}{f(p['hit_rate']):>10}",
        f"{'recall':<28}{f(d['recall']):>10}{f(p['recall']):>10}",
        f"{'mean IoU (matched)':<28}{f(d['mean_iou']):>10}{'':>10}",
        f"{'count exact':<28}{f(d['count_exact']):>10}{f(p['count_exact']):>10}",
        f"{'empty-query accuracy':<28}{f(d['empty_accuracy']):>10}{f(p['empty_accuracy']):>10}",
        f"{'predictions / ground truth':<28}{d['predictions']:>5}/{d['ground_truth']:<4}{p['predictions']:>5}/{p['ground_truth']:<4}",
        f"{'errors':<28}{d['errors']:>10}{p['errors']:>10}",
    ]
    parts = report.get("breakdowns", {})
    for key, title in (("tilt", "tilt (deg)"), ("size", "size (of short side)"), ("shape", "shape")):
        if key in parts:
            lines.append(f"by {title}: " + ", ".join(
                f"{k} {f(v['detect_recall']).strip()}/{f(v['point_recall']).strip()} (n={v['objects']})"
                for k, v in parts[key].items()) + "   [detect/point recall]")
    for key in ("crowd", "form", "background"):
        if key in parts:
            lines.append(f"by {key}: " + ", ".join(
                f"{k} AP50 {f(v['detect_ap50']).strip()} P {f(v['detect_precision']).strip()} "
                f"hit {f(v['point_hit_rate']).strip()} empty {f(v['empty_accuracy']).strip()} (q={v['queries']})"
                for k, v in parts[key].items()))
    if "latency" in report:
        lat = report["latency"]
        lines.append(f"latency, one detect ({lat['threads']} threads, {lat['dtype']}, max_batch 1): "
                     f"median {lat['median_ms']:.1f} ms, p90 {lat['p90_ms']:.1f} ms over {lat['runs']} images")
    def target(k: str, t: dict) -> str:
        if t["met"] is None:
            return f"{k} not measured (target {t['target']})"
        return f"{k} {round(t['value'], 3)} {'✓' if t['met'] else '✗'} (target {t['target']})"

    lines.append("targets: " + ", ".join(target(k, t) for k, t in report["targets"].items()))
    if "qa" in report:
        lines.append(format_qa_table(report["qa"]))
    return "\n".join(lines)


def engine_options(pairs: Sequence[str]) -> dict:
    """`--engine FIELD=VALUE` pairs → EngineConfig overrides (true/false/none, integers, else text)."""
    from dataclasses import fields

    from engine.serving.config import EngineConfig

    known = {f.name for f in fields(EngineConfig)} - {"max_batch"}
    out: dict = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in known:
            raise ValueError(f"--engine {pair!r}: use FIELD=VALUE with FIELD one of {', '.join(sorted(known))} "
                             "(--max-batch sets max_batch)")
        low = text.lower()
        out[name] = ({"true": True, "false": False, "none": None}[low] if low in ("true", "false", "none")
                     else int(text) if text.lstrip("-").isdigit() else text)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.evaluate", description=__doc__.splitlines()[0])
    ap.add_argument("--generator", default="own", choices=GENERATORS,
                    help="own: the training distribution (another seed); independent: separately written scenes")
    ap.add_argument("--weights", default=None, help="checkpoint directory (default: the embedded model in assets/)")
    ap.add_argument("--n", type=int, default=500, help="number of (scene, query) pairs")
    ap.add_argument("--seed", type=int, default=12345, help="held-out scene seed (training uses its own seed)")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--latency-runs", type=int, default=30, help="detect requests timed with a max_batch=1 engine (0: skip)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the latency measurement")
    ap.add_argument("--qa", type=int, default=0, metavar="N",
                    help="also ask every question kind and caption on N held-out own-generator scenes (0: skip)")
    ap.add_argument("--qa-only", action="store_true", help="only the questions and captions (no detect/point, no latency)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where the evaluated engine runs (the latency measurement always uses the CPU)")
    ap.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16"),
                    help="compute dtype of the evaluated engine and of the latency measurement (auto: what the engine "
                         "picks, as the UI and CLI do: bf16 on a GPU or a CPU with native bf16, else fp32)")
    ap.add_argument("--engine", action="append", default=[], metavar="FIELD=VALUE",
                    help="an EngineConfig field of the evaluated engine, e.g. kernels=torch, use_graphs=false, "
                         "device_crops=false, group_prefix=never (repeatable): the metrics must not move")
    ap.add_argument("--json", default=None, help="also write the report here as JSON (default: print only)")
    a = ap.parse_args(argv)
    if a.qa_only and a.qa <= 0:
        ap.error("--qa-only needs --qa N (the number of scenes to ask about)")
    try:
        options = engine_options(a.engine)
    except ValueError as e:
        ap.error(str(e))
    report = evaluate(a.weights, n=a.n, seed=a.seed, max_batch=a.max_batch, latency_runs=a.latency_runs, threads=a.threads,
                      generator=a.generator, qa=a.qa, objects=not a.qa_only, device=a.device, engine_options=options,
                      dtype=a.dtype)
    print(format_table(report))
    if not a.json:
        return 0
    path = Path(a.json)
    try:
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    except OSError as e:
        print(f"could not write {path}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

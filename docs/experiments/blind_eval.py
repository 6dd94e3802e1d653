"""Evaluate a checkpoint on a separately written scene generator: the third to twelfth
(engine/training/foreign/, each written as a blind check: the third to sixth in sessions 36-38, training sources
since session 51; the seventh (session 38) and eighth (session 51), training sources since session 53; the ninth
(stickers and 3D-ish tokens on photograph-like backgrounds), tenth (worksheets, app screenshots, neon, magnets,
mosaics, LED panels, patches), eleventh (crayon, marker and chalk drawings, pixel art, CRTs, cross-stitch, cork
boards; it chose in session 55) and twelfth (stained glass, bevelled tiles, printed fabric, watercolour, road
paint, night photos, under water; it chose in session 56), moved from docs/experiments/ and training sources
since session 56), the thirteenth (docs/experiments/thirteenth_scenes.py, blind: halftone newspaper print,
spray paint on brick, glossy plastic 3-D renders, frosted or rainy glass, hard sunlight with cast shadows, icing
on cakes and cookies, metal enamel), the fourteenth (docs/experiments/fourteenth_scenes.py, read in session 58: rubber-stamp
ink prints, knitted wool, folded-paper origami, fog over a scene with depth, shaky rolling-shutter phone photos,
fisheye action-camera photos, phone photos of an LCD screen with moire) or the fifteenth
(docs/experiments/fifteenth_scenes.py, blind, session 58: coloured sand on a beach, an assembled jigsaw with
shifted pieces, wooden cut-outs on fallen leaves, print on crumpled paper, plasticine on a cutting mat, glitter
glue on card, a slide projected onto a curtain or wall) or the sixteenth
(docs/experiments/sixteenth_scenes.py, blind, session 59: felt cut-outs on a patterned rug seen at an angle,
a printed card under bubble wrap, laser-cut acrylic with glowing edges on the cutting bed, resin inlays in a
polished terrazzo floor, a low-bitrate cartoon video frame, painted blocks on a glossy lacquered table with
reflections, an open picture book with curling pages).

    python docs/experiments/blind_eval.py --generator third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth --weights DIR [--n 500]
                                          [--seed S] [--dtype auto|fp32|bf16] [--json OUT]
                                          [--split LABEL=KIND,KIND,...]

`--split` adds the headline metrics over the scenes of the named kinds (the generator's `background`
labels) and over the rest, e.g. `--split cells=stitch,pixelart` for the eleventh (session 54's rule).

Metrics are computed as `engine.training.evaluate.evaluate()` computes them (its public metric
functions); also a per-shape / per-colour / per-background / per-size breakdown of detect and point recall.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from docs.experiments.fifteenth_scenes import fifteenth_batch  # noqa: E402
from docs.experiments.sixteenth_scenes import sixteenth_batch  # noqa: E402
from docs.experiments.fourteenth_scenes import fourteenth_batch  # noqa: E402
from docs.experiments.thirteenth_scenes import thirteenth_batch  # noqa: E402
from engine.training.evaluate import (greedy_match, mean_of, point_match, score_objects,  # noqa: E402
                                      subset_metrics)
from engine.training.foreign import batch_function  # noqa: E402

# name → (batch function, default seed)
GENERATORS = {**{name: (batch_function(name), seed) for name, seed in
                 (("third", 777), ("fourth", 4444), ("fifth", 5555), ("sixth", 6666), ("seventh", 7777),
                  ("eighth", 8888), ("ninth", 9999), ("tenth", 10101), ("eleventh", 11011), ("twelfth", 12121))},
              "thirteenth": (thirteenth_batch, 13131), "fourteenth": (fourteenth_batch, 14141),
              "fifteenth": (fifteenth_batch, 15151), "sixteenth": (sixteenth_batch, 16161)}


def decode_bf16(generator: str, weights: str, n: int = 500):
    """(scenes with queries, answers) of `score_objects` on the generator's default seed, bf16 on the CPU (as this
    script decodes them); for the scripts that read where the errors are (count_direction, point_misses)."""
    from engine.serving.engine import Engine

    batch, seed = GENERATORS[generator]
    data = batch(seed, n)
    engine = Engine.from_pretrained(weights, device="cpu", dtype="bf16", max_batch=16)
    _, answers = score_objects(engine, data, say=lambda *m: None)
    return data, answers


def _recall_by(data, det, pts, key):
    table: dict[str, list[int]] = {}
    for (scene, query), boxes, points in zip(data, det, pts):
        _, fd = greedy_match(boxes, [o.box for o in query.matches])
        _, fp = point_match(points, query.matches, scene.image.size)
        for o, a, b in zip(query.matches, fd, fp):
            c = table.setdefault(key(scene, o), [0, 0, 0])
            c[0] += 1
            c[1] += a
            c[2] += b
    return {k: {"objects": n, "detect_recall": d / n, "point_recall": p / n} for k, (n, d, p) in sorted(table.items())}


def _headlines(data, answers, idx) -> dict:
    """AP50, point hit, exact count and absent→empty (as `score_objects` reports them) over data[idx]."""
    dm, pm = subset_metrics(data, answers["detect"], answers["point"], answers["scores"], idx)
    return {"queries": len(idx), "detect_ap50": dm["ap50"], "point_hit_rate": pm["hit_rate"],
            "count_exact": mean_of(dm["count_exact"], pm["count_exact"]),
            "empty_accuracy": mean_of(dm["empty_accuracy"], pm["empty_accuracy"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generator", required=True, choices=sorted(GENERATORS))
    ap.add_argument("--weights", required=True)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None, help="default: 777 (third), 4444 (fourth), 5555 (fifth), 6666 (sixth), 7777 (seventh), 8888 (eighth), 9999 (ninth), 10101 (tenth), 11011 (eleventh), 12121 (twelfth), 13131 (thirteenth), 14141 (fourteenth), 15151 (fifteenth), 16161 (sixteenth)")
    ap.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--split", default=None, metavar="LABEL=KIND,KIND",
                    help="also report the headline metrics over scenes of these kinds and over the rest")
    a = ap.parse_args(argv)
    if a.split is not None and "=" not in a.split:
        ap.error("--split takes LABEL=KIND,KIND,... (e.g. cells=stitch,pixelart)")

    from engine.serving.engine import Engine

    batch, seed = GENERATORS[a.generator]
    a.seed = seed if a.seed is None else a.seed
    t0 = time.perf_counter()
    data = batch(a.seed, a.n)
    print(f"generated {a.n} {a.generator} scenes (seed {a.seed}) in {time.perf_counter() - t0:.1f}s", flush=True)
    engine = Engine.from_pretrained(a.weights, device="cpu", dtype=a.dtype, max_batch=16)
    report: dict = {"weights": str(a.weights), "generator": a.generator, "n": a.n, "seed": a.seed,
                    "dtype": engine.model_info.dtype}
    metrics, answers = score_objects(engine, data, say=lambda *m: print(*m, flush=True))
    report.update(metrics)
    det, pts = answers["detect"], answers["point"]
    report["breakdowns"]["colour"] = _recall_by(data, det, pts, lambda s, o: o.colour)
    report["breakdowns"]["background_objects"] = _recall_by(data, det, pts, lambda s, o: s.background)
    report["breakdowns"]["shape_colour"] = _recall_by(data, det, pts, lambda s, o: f"{o.colour} {o.shape}")

    d, p = report["detect"], report["point"]
    pct = lambda v: "—" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    print(f"detect AP50      {pct(d['ap50'])}")
    print(f"detect precision {pct(d['precision'])}")
    print(f"detect recall    {pct(d['recall'])}")
    print(f"point hit rate   {pct(p['hit_rate'])}   (point recall {pct(p['recall'])})")
    print(f"exact count      {pct(report['count_exact'])}   (detect {pct(d['count_exact'])}, point {pct(p['count_exact'])})")
    print(f"empty accuracy   {pct(report['empty_accuracy'])}   ({d['empty_queries']} empty queries)")
    print(f"queries          {d['queries']}   (ground-truth objects {d['ground_truth']})")
    b = report["breakdowns"]
    for key in ("shape", "colour", "size", "tilt", "background_objects"):
        print(f"recall by {key}: " + ", ".join(f"{k} {pct(v['detect_recall'])}/{pct(v['point_recall'])} (n={v['objects']})"
                                            for k, v in b[key].items()) + "  [detect/point]")
    for key in ("form", "crowd", "background"):
        print(f"by {key}: " + ", ".join(f"{k} AP50 {pct(v['detect_ap50'])} P {pct(v['detect_precision'])} "
                                        f"empty {pct(v['empty_accuracy'])} (q={v['queries']})" for k, v in b[key].items()))
    if a.split is not None:
        label, kinds = a.split.split("=", 1)
        chosen = {k.strip() for k in kinds.split(",") if k.strip()}
        unknown = chosen - {scene.background for scene, _ in data}
        if unknown:
            print(f"--split: no {a.generator} scene has kind {', '.join(sorted(unknown))}")
        inside = [i for i, (scene, _) in enumerate(data) if scene.background in chosen]
        outside = [i for i, (scene, _) in enumerate(data) if scene.background not in chosen]
        report["split"] = {"label": label, "kinds": sorted(chosen), label: _headlines(data, answers, inside),
                           "rest": _headlines(data, answers, outside)}
        for name in (label, "rest"):
            h = report["split"][name]
            print(f"split {name}: AP50 {pct(h['detect_ap50'])} hit {pct(h['point_hit_rate'])} "
                  f"exact {pct(h['count_exact'])} empty {pct(h['empty_accuracy'])} (q={h['queries']})")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

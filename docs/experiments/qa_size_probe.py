"""Where the embedded model's count questions and captions fail, by the pixel size of the smallest
object they depend on (issue 17; session 49).

    python docs/experiments/qa_size_probe.py [--weights DIR] [--n 400] [--seed 999] [--dtype fp32] [--json OUT]

On n own-generator scenes (the distribution `engine.evaluate --qa` scores), each scene gets one count
question, drawn as `engine.training.qa.ask_count` draws it, the same query as a detect request, and a
short caption. A count question depends on the objects it counts; a caption on every vocabulary
object in the scene. Their smallest one's size in pixels (circumscribed diameter,
`SceneObject.size` × the image's short side) buckets the answers. The question asked is always
"How many {plural} are there?", so wording is not what varies here.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402

from engine.serving.engine import Engine  # noqa: E402
from engine.training import qa as Q  # noqa: E402
from engine.training.evaluate import score_answer  # noqa: E402
from engine.training.scenes import OWN_SCENES, make_scene  # noqa: E402

PX_EDGES = (0, 9, 12, 16, 24)
BUCKETS = [f"{lo}-{hi} px" for lo, hi in zip(PX_EDGES, PX_EDGES[1:])] + [f">={PX_EDGES[-1]} px", "no object"]
KIND_BINS = {"0": (0, 1), "1-2": (1, 3), "3-5": (3, 6), "6-9": (6, 10), "10+": (10, 10**6)}


def bucket(px: float | None) -> str:
    if px is None:
        return BUCKETS[-1]
    return BUCKETS[int(np.searchsorted(PX_EDGES, px, side="right")) - 1]


def rates(groups: dict[str, list[dict]], keys: tuple[str, ...]) -> dict:
    """{group: {"n": rows, key: mean of the key}} for the groups that have rows, in the given order."""
    return {g: {"n": len(rows), **{k: float(np.mean([r[k] for r in rows])) for k in keys}}
            for g, rows in groups.items() if rows}


def by_bucket(rows: list[dict], keys: tuple[str, ...]) -> dict:
    return rates({b: [r for r in rows if r["bucket"] == b] for b in BUCKETS}, keys)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="assets/model")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=999)
    ap.add_argument("--dtype", default="fp32", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    counts, captions = [], []
    for i in range(a.n):
        rng = np.random.default_rng([a.seed, i])
        scene = make_scene(rng, **OWN_SCENES)
        short = min(scene.size)
        known = [o for o in scene.objects if o.known]
        captions.append((scene, Q.caption_text(Q.known_counts(scene), "short"),
                         min(o.size for o in known) * short if known else None))
        query = Q.count_query(rng, scene)
        if query is not None:
            _, plural = Q.query_names(rng, query.text)   # the wording qa.ask_count uses
            px = min(o.size for o in query.matches) * short if query.matches else None
            counts.append((scene, query, f"How many {plural} are there?", px))

    engine = Engine.from_pretrained(a.weights, device="cpu", dtype=a.dtype, max_batch=16).start()
    try:
        def results(requests: list[tuple], chunk: int = 256) -> list[dict]:   # the queue holds 1,024
            out = []
            for start in range(0, len(requests), chunk):
                out += [h.result() for h in [engine.submit(*r[:-1], **r[-1]) for r in requests[start:start + chunk]]]
            return out

        hq = results([(s.image, "query", question, {"max_tokens": 8}) for s, _, question, _ in counts])
        hd = results([(s.image, "detect", q.text, {}) for s, q, _, _ in counts])
        hc = results([(s.image, "caption", {"length": "short", "max_tokens": 160}) for s, _, _ in captions])
        count_rows = [{"true": len(q.matches), "qa": Q.parse_count(x["answer"]),
                       "detect": len(y["objects"]), "px": px, "bucket": bucket(px),
                       "short_side": min(s.size), "objects": len(s.objects)}
                      for (s, q, _, px), x, y in zip(counts, hq, hd)]
        caption_rows = []
        for (s, truth, px), h in zip(captions, hc):
            got = h["caption"]
            caption_rows.append({"right": score_answer("caption", got, truth), "px": px, "bucket": bucket(px),
                                 "kinds": len(Q.known_counts(s)), "expected": truth, "got": got})
    finally:
        engine.close()
    for r in count_rows:
        r["qa_right"], r["detect_right"] = r["qa"] == r["true"], r["detect"] == r["true"]

    report = {
        "weights": a.weights, "n": a.n, "seed": a.seed, "dtype": a.dtype,
        "count": {"questions": len(count_rows),
                  "qa_right": float(np.mean([r["qa_right"] for r in count_rows])),
                  "detect_right": float(np.mean([r["detect_right"] for r in count_rows])),
                  "qa_vs_detect": {f"{k[0]}/{k[1]}": v for k, v in Counter(
                      ("qa right" if r["qa_right"] else "qa wrong", "detect right" if r["detect_right"] else "detect wrong")
                      for r in count_rows).items()},
                  "by_smallest_counted_object": by_bucket(count_rows, ("qa_right", "detect_right"))},
        "caption": {"captions": len(caption_rows), "right": float(np.mean([r["right"] for r in caption_rows])),
                    "by_smallest_object": by_bucket(caption_rows, ("right",)),
                    "by_kinds": rates({k: [r for r in caption_rows if lo <= r["kinds"] < hi]
                                       for k, (lo, hi) in KIND_BINS.items()}, ("right",))},
    }
    print(f"count questions: {report['count']['questions']}, answered right {report['count']['qa_right']:.1%}, "
          f"the same query's detect gives the right number {report['count']['detect_right']:.1%}")
    print("  " + ", ".join(f"{k}: {v}" for k, v in report["count"]["qa_vs_detect"].items()))
    for b, v in report["count"]["by_smallest_counted_object"].items():
        print(f"  smallest counted object {b:>10}: n={v['n']:4d}  question {v['qa_right']:.1%}  detect {v['detect_right']:.1%}")
    print(f"captions (short): {report['caption']['captions']}, name exactly the kinds present {report['caption']['right']:.1%}")
    for b, v in report["caption"]["by_smallest_object"].items():
        print(f"  smallest object in the scene {b:>10}: n={v['n']:4d}  right {v['right']:.1%}")
    for b, v in report["caption"]["by_kinds"].items():
        print(f"  kinds in the scene {b:>5}: n={v['n']:4d}  right {v['right']:.1%}")
    if a.json:
        Path(a.json).write_text(json.dumps({**report, "count_rows": count_rows, "caption_rows": caption_rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

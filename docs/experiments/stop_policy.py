"""Experiment, not kept (README, "The embedded model"): would a different stop rule or a score floor
fix the embedded model's exact counts?

    python docs/experiments/stop_policy.py collect own 777 300 OUT.json [THREADS]   # decode with the stop
    python docs/experiments/stop_policy.py analyze OUT.json ...                      # policies, offline

`collect` decodes point and detect with the reference procedure, but continues while p(another object)
≥ 0.02 (the engine's rule is > 0.5) up to 30 objects, recording each object's p(another) and score.
The output of any threshold above 0.02 is a prefix of that sequence, so `analyze` can replay the engine's
rule (0.5, which reproduces `engine.evaluate` exactly) and the alternatives: a lower continue threshold,
a score floor on every object, or a gate on the first object's score.
"""
import sys

import json, time

import numpy as np
import torch
from engine.model.pretrained import load_pretrained
from engine.serving.engine import DEFAULT_WEIGHTS
from engine.model.image import overlap_crop_image
from engine.model.text import KVCache
from engine.model.region import more_probability
from engine.serving.limits import kv_positions
from engine.serving.skills import ObjectBuilder, prompt_ids, normalize_query
from engine.training.evaluate import generate

TAU = 0.02; MAXOBJ = 30

@torch.inference_mode()
def run(crops_prefix, prompt, skill):
    need = kv_positions(cfg.prefix_len, len(prompt), skill, MAXOBJ)
    kv = KVCache.allocate(cfg.text, rows=1, max_len=min(need, cfg.text.max_context), device="cpu", dtype=torch.float32)
    row = torch.zeros(1, dtype=torch.long)
    text.prefill(crops_prefix, kv, row, torch.zeros(1, dtype=torch.long))
    hidden = text.prefill(model.embed_ids(torch.tensor(prompt))[None], kv, row, torch.full((1,), cfg.prefix_len))[:, -1]
    pos = cfg.prefix_len + len(prompt)
    def step(e):
        nonlocal pos
        h = text.decode(e, kv, torch.tensor([pos]), pos + 1, "torch"); pos += 1; return h
    b = ObjectBuilder(skill, guard=True); pm = []; stop_p = None
    while len(b.objects) < MAXOBJ and not b.repeated:
        logits = text.logits(hidden)[0]
        p = float(more_probability(logits, t.coord_id, t.eos_id))
        if p < TAU:
            stop_p = p; break
        x, px = region.decode_coord_p(hidden); b.add_coord(float(x), p, float(px)); hidden = step(region.encode_coord(x))
        y, py = region.decode_coord_p(hidden); o = b.add_coord(float(y), 1.0, float(py)); hidden = step(region.encode_coord(y))
        if skill == "detect":
            wh, pwh = region.decode_size_p(hidden)
            o = b.add_size(float(wh[0, 0]), float(wh[0, 1]), float(pwh[0, 0]), float(pwh[0, 1])); hidden = step(region.encode_size(wh))
        pm.append(p)
    return b.result(), pm, b.repeated, stop_p

def collect(gen, seed, n, out, threads=2):
    global model, tok, cfg, t, text, region, enc
    torch.set_num_threads(threads)
    model, tok, info = load_pretrained(DEFAULT_WEIGHTS, device="cpu", dtype="fp32")
    cfg = model.config; t = cfg.tokens; text, region = model.text, model.region
    enc = lambda s: tok.encode(s).ids
    data = generate(gen, seed, n)
    recs = []; t0 = time.time()
    for i, (scene, q) in enumerate(data):
        crops = overlap_crop_image(scene.image, cfg.vision)
        with torch.inference_mode():
            prefix = model.encode_image(crops)
        r = {"size": list(scene.image.size), "query": q.text, "gt": [list(o.box) for o in q.matches]}
        for skill in ("detect", "point"):
            res, pm, rep, sp = run(prefix, prompt_ids(t, enc, skill, normalize_query(q.text)), skill)
            objs = res["objects" if skill == "detect" else "points"]
            r[skill] = {"objs": objs, "p_more": pm, "repeated": rep}
        recs.append(r)
        if i % 50 == 0: print(i, time.time() - t0, flush=True)
    json.dump(recs, open(out, "w"))

from engine.training.evaluate import detect_metrics
def policy(rec, skill, tc, floor=0.0, first=0.0):
    d = rec[skill]; objs = []
    for o, p in zip(d["objs"], d["p_more"]):
        if p <= tc: break
        objs.append(o)
    if objs and objs[0]["score"] < first: return []
    return [o for o in objs if o["score"] >= floor]
def metrics(recs, **kw):
    items, scores, cnt, emp, ne = [], [], [], 0, 0
    for r in recs:
        objs = policy(r, "detect", **kw)
        b = [(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in objs]
        items.append((b, [tuple(g) for g in r["gt"]])); scores.append([o["score"] for o in objs])
        pc = len(policy(r, "point", **kw))
        cnt.append(((len(objs) == len(r["gt"])) + (pc == len(r["gt"]))) / 2)
        if not r["gt"]:
            ne += 1; emp += ((len(objs) == 0) + (pc == 0)) / 2
    m = detect_metrics(items, scores=scores)
    return m["ap50"], m["count_exact"], np.mean(cnt), emp / ne if ne else float("nan"), m["precision"], m["recall"]


def analyze(files):
    grid = [dict(tc=0.5), dict(tc=0.3), dict(tc=0.1), dict(tc=0.1, floor=0.3), dict(tc=0.5, first=0.6), dict(tc=0.5, floor=0.5)]
    for f in files:
        recs = json.load(open(f))
        for kw in grid:
            print(f, kw, "ap50 %.3f detect-count %.3f count %.3f empty %.3f P %.3f R %.3f" % metrics(recs, **kw))


if __name__ == "__main__":
    if sys.argv[1] == "collect":
        collect(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], *(int(x) for x in sys.argv[6:7]))
    else:
        analyze(sys.argv[2:])

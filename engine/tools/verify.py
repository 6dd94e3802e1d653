"""Check the engine on your own weights: the blocking reference decoder against the pipelined engine.

    python -m engine.verify --weights vikhyatk/moondream2 [--device auto] [--dtype auto]
                            [--samples DIR] [--objects "hexagon,circle"] [--max-objects 10] [--steps 8]

For every sample image (default assets/samples), skill (point, detect) and object, the request
runs through `engine.model.reference.reference_generate` (one request at a time, PyTorch decode
path) and through the pipelined engine (all requests submitted together, so they are batched).
In fp32 the objects must be identical (coordinates exactly; scores, rounded to 4 decimals, within
0.001). In bf16/fp16 the two decoders round differently (the fused kernels and batched GEMMs sum in
another order), so a near-tie between two coordinate bins can go either way: there the outputs must
agree — the same number of objects, every coordinate within 0.01 of the image side and every score
within 0.05 (`--coord-tol`, `--score-tol`), each object paired with its nearest (a rounding difference
may swap two objects' order) — and the line says "identical" or "agrees" with the largest differences. Separately, each request runs alone through the engine in blocking
mode, and its logits of the point/detect tokens (coord, size, EOS: all its sampling computes for
such rows) at the first `--steps` "another object?" decisions are compared with the reference's
full-vocabulary logits there: the largest absolute difference is printed (0 on the CPU in fp32; bf16 on a GPU with
the fused kernels differs by rounding). Exit status 0 when every output is identical or agrees,
1 when one differs, 2 when the model cannot be loaded.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.model.checkpoint import CheckpointError
from engine.model.device import DeviceError
from engine.model.image import ImageError, load_image, overlap_crop_image
from engine.model.pretrained import add_model_arguments, load_pretrained
from engine.model.reference import reference_generate
from engine.serving.engine import DEFAULT_WEIGHTS, Engine
from engine.serving.skills import prompt_ids

DEFAULT_SAMPLES = DEFAULT_WEIGHTS.parent / "samples"
SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass
class Case:
    image: Path
    skill: str
    obj: str
    reference: dict | None = None
    engine: dict | None = None
    ref_logits: list[torch.Tensor] | None = None
    logit_diff: float | None = None
    decisions: int = 0

    coord_diff: float = 0.0
    score_diff: float = 0.0
    verdict: str = ""


TOLERANCES = {"fp32": (0.0, 1e-3)}   # (coordinate, score); other dtypes: REDUCED
REDUCED = (0.01, 0.05)


def compare(reference: dict, engine: dict, coord_tol: float, score_tol: float) -> tuple[str, float, float]:
    """"identical", "agrees" or "DIFFERENT", with the largest |Δcoordinate| and |Δscore| over the
    objects (both results of one skill). Different counts are DIFFERENT (Δ = inf). "identical" means
    equal in order; for "agrees" each reference object is paired with the nearest engine object not
    yet paired (a rounding difference may swap two objects' order), and the pairs are compared."""
    ref, got = next(iter(reference.values())), next(iter(engine.values()))
    if len(ref) != len(got):
        return "DIFFERENT", float("inf"), float("inf")
    if ref == got:
        return "identical", 0.0, 0.0

    def apart(a: dict, b: dict) -> float:
        return max((abs(a[k] - b[k]) for k in a if k != "score"), default=0.0)

    left, dc, ds = list(got), 0.0, 0.0
    for a in ref:
        b = min(left, key=lambda o: apart(a, o))
        left.remove(b)
        dc, ds = max(dc, apart(a, b)), max(ds, abs(a.get("score", 0.0) - b.get("score", 0.0)))
    return ("agrees" if dc <= coord_tol and ds <= score_tol else "DIFFERENT"), dc, ds


def engine_decision_logits(engine: Engine, picture, case: Case, max_objects: int, steps: int) -> list[torch.Tensor]:
    """The logits the engine's runner computes at each "another object?" decision of one request
    (those of its `spatial_ids`), run alone in blocking mode: the prefill, then every 2 (point) or
    3 (detect) decode steps."""
    handle = engine.submit(picture, case.skill, case.obj, max_objects=max_objects)
    per_object = 3 if case.skill == "detect" else 2
    found, launched = [], 0
    while not handle.future.done() and engine.step():
        if launched % per_object == 0 and len(found) < steps:
            found.append(engine.runner.sampler.spatial_logits[0].float().cpu().clone())
        launched += 1
    handle.result()
    return found


def run(args: argparse.Namespace) -> int:
    model, tokenizer, info = load_pretrained(DEFAULT_WEIGHTS if args.weights is None else args.weights,
                                             tokenizer=args.tokenizer, device=args.device, dtype=args.dtype,
                                             progress=sys.stderr.isatty())
    print(f"model: {info.describe()}", flush=True)
    folder = Path(args.samples)
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in SUFFIXES) if folder.is_dir() else []
    if not images:
        raise CheckpointError(f"no sample images in {folder}; pass --samples DIR")
    objects = [o.strip() for o in args.objects.split(",") if o.strip()]
    cases = [Case(img, skill, obj) for img in images for skill in ("point", "detect") for obj in objects]
    cfg = model.config
    encode = lambda s: tokenizer.encode(s).ids  # noqa: E731
    pictures = {img: load_image(img) for img in images}

    for case in cases:   # the oracle, one request at a time
        crops = overlap_crop_image(pictures[case.image], cfg.vision)
        ref_logits: list[torch.Tensor] = []
        case.reference = reference_generate(model, crops, prompt_ids(cfg.tokens, encode, case.skill, case.obj),
                                            case.skill, args.max_objects,
                                            on_logits=lambda t: ref_logits.append(t.float().cpu()))
        case.ref_logits = ref_logits[: args.steps]

    pipelined = Engine(model, tokenizer, max_batch=min(len(cases), 32), max_objects=args.max_objects)
    handles = [pipelined.submit(pictures[c.image], c.skill, c.obj, max_objects=args.max_objects) for c in cases]
    for case, handle in zip(cases, handles):
        case.engine = handle.result()
    del pipelined

    blocking = Engine(model, tokenizer, max_batch=1, max_objects=args.max_objects, pipelined=False)
    for case in cases:
        got = engine_decision_logits(blocking, pictures[case.image], case, args.max_objects, args.steps)
        pairs = list(zip((t[blocking.runner.sampler.spatial_ids] for t in case.ref_logits), got))
        case.decisions = len(pairs)
        case.logit_diff = max((float((a - b).abs().max()) for a, b in pairs), default=0.0)

    coord_tol, score_tol = TOLERANCES.get(info.dtype, REDUCED)
    coord_tol = coord_tol if args.coord_tol is None else args.coord_tol
    score_tol = score_tol if args.score_tol is None else args.score_tol
    width = max(len(c.image.name) for c in cases)
    for c in cases:
        c.verdict, c.coord_diff, c.score_diff = compare(c.reference, c.engine, coord_tol, score_tol)
        n_ref = len(next(iter(c.reference.values())))
        n_eng = len(next(iter(c.engine.values())))
        detail = f"  max|Δcoord| {c.coord_diff:.3g} max|Δscore| {c.score_diff:.3g}" if c.verdict != "identical" else ""
        print(f"{c.image.name:<{width}}  {c.skill:<6} {c.obj!r:<14} reference {n_ref:>2}  pipelined {n_eng:>2}  "
              f"{c.verdict}  max|Δlogit| {c.logit_diff:.3g} ({c.decisions} decisions){detail}")
    same = sum(c.verdict == "identical" for c in cases)
    close = sum(c.verdict == "agrees" for c in cases)
    worst = max(c.logit_diff for c in cases)
    ok = same + close == len(cases)
    agreed = f", {close} more agree (|Δcoord| ≤ {coord_tol:g}, |Δscore| ≤ {score_tol:g}, {info.dtype})" if close else ""
    print(f"{'PASS' if ok else 'FAIL'}: {same}/{len(cases)} outputs identical{agreed} (reference decoder vs pipelined "
          f"engine); max |logit difference| over the first {args.steps} decisions: {worst:.3g}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.verify", description=__doc__.splitlines()[0])
    add_model_arguments(p)
    p.add_argument("--samples", default=str(DEFAULT_SAMPLES), metavar="DIR",
                   help="folder of images (default: the built-in samples)")
    p.add_argument("--objects", default="hexagon,circle", help="comma-separated objects (default 'hexagon,circle')")
    p.add_argument("--max-objects", type=int, default=10, metavar="N", help="most objects per request (default 10)")
    p.add_argument("--steps", type=int, default=8, metavar="N", help="decisions whose logits are compared (default 8)")
    p.add_argument("--coord-tol", type=float, default=None, metavar="T",
                   help="largest coordinate difference (fraction of the image side) that still agrees "
                        "(default 0 in fp32, 0.01 in bf16/fp16)")
    p.add_argument("--score-tol", type=float, default=None, metavar="T",
                   help="largest score difference that still agrees (default 0.001 in fp32, 0.05 in bf16/fp16)")
    args = p.parse_args(argv)
    if (args.coord_tol is not None and args.coord_tol < 0) or (args.score_tol is not None and args.score_tol < 0):
        p.error("--coord-tol and --score-tol must be 0 or more")
    if not 1 <= args.max_objects <= 200 or args.steps < 1:
        p.error("--max-objects must be 1-200 and --steps at least 1")
    try:
        return run(args)
    except (CheckpointError, DeviceError, ImageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

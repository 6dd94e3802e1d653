"""Check the engine on your own weights: the blocking reference decoder against the pipelined engine.

    python -m engine.verify --weights vikhyatk/moondream2 [--device auto] [--dtype auto]
                            [--samples DIR] [--objects "hexagon,circle"] [--max-objects 10] [--steps 8]

For every sample image (default assets/samples), skill (point, detect) and object, the request
runs through `engine.model.reference.reference_generate` (one request at a time, PyTorch decode
path) and through the pipelined engine (all requests submitted together, so they are batched);
the outputs must be identical. Separately, each request runs alone through the engine in blocking
mode, and its logits at the first `--steps` "another object?" decisions are compared with the
reference's: the largest absolute difference is printed (0 on the CPU in fp32; bf16 on a GPU with
the fused kernels differs by rounding). Exit status 0 when every output is identical, 1 when one
differs, 2 when the model cannot be loaded.
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

    @property
    def identical(self) -> bool:
        return self.reference == self.engine


def engine_decision_logits(engine: Engine, picture, case: Case, max_objects: int, steps: int) -> list[torch.Tensor]:
    """The logits the engine's runner computes at each "another object?" decision of one request,
    run alone in blocking mode: the prefill, then every 2 (point) or 3 (detect) decode steps."""
    handle = engine.submit(picture, case.skill, case.obj, max_objects=max_objects)
    per_object = 3 if case.skill == "detect" else 2
    found, launched = [], 0
    while not handle.future.done() and engine.step():
        if launched % per_object == 0 and len(found) < steps:
            found.append(engine.runner.logits[0].float().cpu().clone())
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
        pairs = list(zip(case.ref_logits, got))
        case.decisions = len(pairs)
        case.logit_diff = max((float((a - b).abs().max()) for a, b in pairs), default=0.0)

    width = max(len(c.image.name) for c in cases)
    for c in cases:
        n_ref = len(next(iter(c.reference.values())))
        n_eng = len(next(iter(c.engine.values())))
        print(f"{c.image.name:<{width}}  {c.skill:<6} {c.obj!r:<14} reference {n_ref:>2}  pipelined {n_eng:>2}  "
              f"{'identical' if c.identical else 'DIFFERENT'}  max|Δlogit| {c.logit_diff:.3g} "
              f"({c.decisions} decisions)")
    same = sum(c.identical for c in cases)
    worst = max(c.logit_diff for c in cases)
    verdict = "PASS" if same == len(cases) else "FAIL"
    print(f"{verdict}: {same}/{len(cases)} outputs identical (reference decoder vs pipelined engine); "
          f"max |logit difference| over the first {args.steps} decisions: {worst:.3g}")
    return 0 if same == len(cases) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.verify", description=__doc__.splitlines()[0])
    add_model_arguments(p)
    p.add_argument("--samples", default=str(DEFAULT_SAMPLES), metavar="DIR",
                   help="folder of images (default: the built-in samples)")
    p.add_argument("--objects", default="hexagon,circle", help="comma-separated objects (default 'hexagon,circle')")
    p.add_argument("--max-objects", type=int, default=10, metavar="N", help="most objects per request (default 10)")
    p.add_argument("--steps", type=int, default=8, metavar="N", help="decisions whose logits are compared (default 8)")
    args = p.parse_args(argv)
    if not 1 <= args.max_objects <= 200 or args.steps < 1:
        p.error("--max-objects must be 1-200 and --steps at least 1")
    try:
        return run(args)
    except (CheckpointError, DeviceError, ImageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

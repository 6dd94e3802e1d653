"""Command line: `python -m engine {detect,point,random-checkpoint} …`.

    python -m engine detect IMAGE "OBJECT" [--weights DIR|ID] [--tokenizer PATH|ID] [--device auto] [--max-objects N]
    python -m engine point  IMAGE "OBJECT" [--weights DIR|ID] [--tokenizer PATH|ID] [--device auto] [--max-objects N]

`--weights vikhyatk/moondream2` downloads the official release (pinned revision) into the Hugging
Face cache. The model line (path or Hub id, parameters, device, dtype) goes to stderr, the JSON
result to stdout.
    python -m engine random-checkpoint OUT_DIR --preset moondream2|tiny [--seed S]
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.model.checkpoint import CheckpointError, random_state_dict, save_checkpoint
from engine.model.config import PRESETS
from engine.model.device import DeviceError
from engine.model.image import ImageError, load_image
from engine.model.pretrained import add_model_arguments
from engine.serving.errors import RequestError
from engine.serving.limits import DEFAULT_MAX_OBJECTS
from engine.serving.skills import validate_request
from engine.training.vocab import stand_in_tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for skill in ("detect", "point"):
        p = sub.add_parser(skill, help=f"{skill} objects in an image and print JSON")
        p.add_argument("image")
        p.add_argument("object")
        add_model_arguments(p)
        p.add_argument("--max-objects", type=int, default=DEFAULT_MAX_OBJECTS)
        p.add_argument("--blocking", action="store_true", help="run the engine without pipelining")
    r = sub.add_parser("random-checkpoint", help="write a randomly initialised checkpoint directory")
    r.add_argument("out_dir")
    r.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    r.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.command == "random-checkpoint":
        config = PRESETS[args.preset]
        tokenizer = stand_in_tokenizer(config)
        save_checkpoint(args.out_dir, random_state_dict(config, seed=args.seed), config, tokenizer.to_str(),
                        preset=args.preset)
        print(f"wrote {args.preset} checkpoint to {args.out_dir}")
        return 0

    from engine.serving.engine import Engine  # imported late: random-checkpoint needs no engine

    try:  # the request and the image are checked before a (possibly large) model is fetched and loaded
        obj, max_objects = validate_request(args.command, args.object, args.max_objects)
        picture = load_image(args.image)
        engine = Engine.from_pretrained(args.weights, tokenizer=args.tokenizer, device=args.device, dtype=args.dtype,
                                        progress=sys.stderr.isatty(), max_batch=1, pipelined=not args.blocking)
        print(f"model: {engine.model_info.describe()}", file=sys.stderr, flush=True)
        result = engine.submit(picture, args.command, obj, max_objects=max_objects).result()
    except (ImageError, RequestError, CheckpointError, DeviceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # anything else is our fault, but still one line, not a traceback
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

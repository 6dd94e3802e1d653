"""Command line: `python -m engine {detect,point,query,caption,random-checkpoint} …`.

    python -m engine detect  IMAGE "OBJECT" [--weights DIR|ID] [--tokenizer PATH|ID] [--device auto] [--max-objects N]
    python -m engine point   IMAGE "OBJECT" [--weights DIR|ID] [--tokenizer PATH|ID] [--device auto] [--max-objects N]
    python -m engine query   IMAGE "QUESTION" [--choices A,B,…] [--regex R] [--schema FILE_OR_JSON] [--max-tokens N]
    python -m engine caption IMAGE [--length short|normal|long] [--max-tokens N]
    python -m engine random-checkpoint OUT_DIR --preset moondream2|tiny [--seed S]

`--weights vikhyatk/moondream2` downloads the official release (pinned revision) into the Hugging
Face cache. The model line (path or Hub id, parameters, device, dtype) goes to stderr, the JSON
result to stdout.
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
from engine.serving.answers import answer_from_options
from engine.serving.errors import RequestError
from engine.serving.limits import CAPTION_LENGTHS, DEFAULT_MAX_OBJECTS, TEXT_SKILLS
from engine.serving.skills import validate_request
from engine.training.vocab import stand_in_tokenizer

HELPS = {"detect": "detect objects in an image and print JSON", "point": "point at objects in an image and print JSON",
         "query": 'answer a question about an image and print {"answer": ...}',
         "caption": 'describe an image and print {"caption": "..."}'}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for skill, text in HELPS.items():
        p = sub.add_parser(skill, help=text)
        p.add_argument("image")
        if skill in ("detect", "point"):
            p.add_argument("object")
            p.add_argument("--max-objects", type=int, default=DEFAULT_MAX_OBJECTS)
        elif skill == "query":
            p.add_argument("question")
            shape = p.add_mutually_exclusive_group()
            shape.add_argument("--choices", help="comma-separated answers, e.g. yes,no")
            shape.add_argument("--regex", help="the answer must match this regex as a whole")
            shape.add_argument("--schema", help="JSON schema (a file or inline JSON); prints the parsed answer")
        else:
            p.add_argument("--length", choices=CAPTION_LENGTHS, default="normal")
        if skill in TEXT_SKILLS:
            p.add_argument("--max-tokens", type=int, default=None, help="answer tokens at most (default: 768 or what fits)")
        add_model_arguments(p)
        p.add_argument("--blocking", action="store_true", help="run the engine without pipelining")
    r = sub.add_parser("random-checkpoint", help="write a randomly initialised checkpoint directory")
    r.add_argument("out_dir")
    r.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    r.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "random-checkpoint":
        config = PRESETS[args.preset]
        save_checkpoint(args.out_dir, random_state_dict(config, seed=args.seed), config,
                        stand_in_tokenizer(config).to_str(), preset=args.preset)
        print(f"wrote {args.preset} checkpoint to {args.out_dir}")
        return 0

    from engine.serving.engine import Engine  # imported late: random-checkpoint needs no engine

    try:  # the request and the image are checked before a (possibly large) model is fetched and loaded
        if args.command in TEXT_SKILLS:
            options = {"max_tokens": args.max_tokens}
            if args.command == "query":
                options.update(obj=args.question, answer=answer_from_options(choices=args.choices, regex=args.regex,
                                                                               schema=args.schema))
            else:
                options["length"] = args.length
        else:
            obj, max_objects = validate_request(args.command, args.object, args.max_objects)
            options = {"obj": obj, "max_objects": max_objects}
        picture = load_image(args.image)
        engine = Engine.from_pretrained(args.weights, tokenizer=args.tokenizer, device=args.device, dtype=args.dtype,
                                        progress=sys.stderr.isatty(), max_batch=1, pipelined=not args.blocking)
        handle = engine.submit(picture, args.command, **options)  # a refused request: one error line
        print(f"model: {engine.model_info.describe()}", file=sys.stderr, flush=True)
        result = handle.result()
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

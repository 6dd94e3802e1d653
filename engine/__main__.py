"""Command line: `python -m engine {detect,point,query,caption,random-checkpoint} …`.

    python -m engine detect IMAGE "OBJECT" [--weights DIR] [--max-objects N]
    python -m engine point  IMAGE "OBJECT" [--weights DIR] [--max-objects N]
    python -m engine query  IMAGE "QUESTION" [--choices A,B,…] [--regex R] [--schema FILE_OR_JSON] [--max-tokens N]
    python -m engine caption IMAGE [--length short|normal|long] [--max-tokens N]
    python -m engine random-checkpoint OUT_DIR --preset moondream2|tiny [--seed S]
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.model.checkpoint import CheckpointError, random_state_dict, save_checkpoint
from engine.model.config import PRESETS
from engine.model.image import ImageError
from engine.serving.errors import RequestError
from engine.serving.answers import answer_from_options
from engine.serving.limits import CAPTION_LENGTHS, DEFAULT_MAX_OBJECTS, TEXT_SKILLS
from engine.training.vocab import build_tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    helps = {"detect": "detect objects in an image and print JSON", "point": "point at objects in an image and print JSON",
             "query": 'answer a question about an image and print {"answer": ...}',
             "caption": 'describe an image and print {"caption": "..."}'}
    for skill, text in helps.items():
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
        p.add_argument("--weights", default=None, help="checkpoint directory (default: the embedded model)")
        p.add_argument("--device", default="cpu")
        p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
        p.add_argument("--blocking", action="store_true", help="run the engine without pipelining")
    r = sub.add_parser("random-checkpoint", help="write a randomly initialised checkpoint directory")
    r.add_argument("out_dir")
    r.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    r.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.command == "random-checkpoint":
        config = PRESETS[args.preset]
        tokenizer = build_tokenizer(vocab_size=min(512, config.text.vocab_size))
        save_checkpoint(args.out_dir, random_state_dict(config, seed=args.seed), config, tokenizer.to_str(),
                        preset=args.preset)
        print(f"wrote {args.preset} checkpoint to {args.out_dir}")
        return 0

    from engine.serving.engine import Engine  # imported late: random-checkpoint needs no engine

    try:
        if args.command in TEXT_SKILLS:
            options = {"max_tokens": args.max_tokens}
            if args.command == "query":
                options.update(obj=args.question, answer=answer_format(args))
            else:
                options["length"] = args.length
        else:
            options = {"obj": args.object, "max_objects": args.max_objects}
        engine = Engine.from_pretrained(args.weights, device=args.device, dtype=args.dtype, max_batch=1,
                                        pipelined=not args.blocking)
        result = engine.submit(args.image, args.command, **options).result()
    except (ImageError, RequestError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # anything else is our fault, but still one line, not a traceback
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def answer_format(args):
    return answer_from_options(choices=args.choices, regex=args.regex, schema=args.schema)


if __name__ == "__main__":
    sys.exit(main())

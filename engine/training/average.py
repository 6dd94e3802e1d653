"""Checkpoint averaging: one model whose every weight is the mean of the same weight in several
checkpoints of one architecture (consecutive stages of one training line, each fine-tuned from
the one before, so they lie near one another and their mean is a model too).

    python -m engine.training.average --out DIR STAGE_A STAGE_B [STAGE_C ...]

Every source is checked against its own config.json as `load_model` checks it; the sources must
share config.json and tokenizer.json byte for byte (those two files are copied). The mean is
taken in float64 and stored in each tensor's checkpoint dtype (bf16 for the embedded model).
The shipped embedded model is such a mean (README, "The embedded model").
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

from engine.model.checkpoint import (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CheckpointError, check_tensors,
                                     load_config, read_header)


def average_checkpoints(sources: list[str | Path], out: str | Path) -> Path:
    """Write the mean of `sources` (at least two checkpoint directories) into `out`."""
    sources = [Path(s) for s in sources]
    if len(sources) < 2:
        raise CheckpointError(f"averaging needs two or more checkpoints, got {len(sources)}")
    for s in sources:
        if not (s / WEIGHTS_FILE).is_file():
            raise CheckpointError(f"{s}: not a checkpoint directory (no {WEIGHTS_FILE})")
        check_tensors(read_header(s / WEIGHTS_FILE), load_config(s))
        for name in (CONFIG_FILE, TOKENIZER_FILE):
            if (s / name).read_bytes() != (sources[0] / name).read_bytes():
                raise CheckpointError(f"{s}: its {name} differs from {sources[0]}'s; only checkpoints of one "
                                      f"architecture and tokenizer can be averaged")
    first = load_file(str(sources[0] / WEIGHTS_FILE))
    total = {key: t.double() for key, t in first.items()}
    for s in sources[1:]:   # the same keys: one config.json, checked above
        for key, t in load_file(str(s / WEIGHTS_FILE)).items():
            total[key] += t.double()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: (v / len(sources)).to(first[k].dtype).contiguous() for k, v in total.items()}, str(out / WEIGHTS_FILE))
    for name in (CONFIG_FILE, TOKENIZER_FILE):
        shutil.copyfile(sources[0] / name, out / name)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.training.average", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("sources", nargs="+", help="checkpoint directories (two or more, one architecture)")
    args = p.parse_args(argv)
    try:
        out = average_checkpoints(args.sources, args.out)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}: the mean of {len(args.sources)} checkpoints")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""From `--weights ID|DIR`, `--tokenizer`, `--device`, `--dtype` to a loaded model, in one place.

    model, tokenizer, info = load_pretrained("vikhyatk/moondream2", device="auto")
    print(info.describe())   # vikhyatk/moondream2@2025-06-21 · 1.93 B parameters · cuda:0 · bf16

Weights come from a local directory or the Hub (engine.model.hub), the tokenizer is chosen and
checked by engine.model.tokenizer.resolve_tokenizer, the device and dtype by engine.model.device.
Every failure is a CheckpointError or a DeviceError with a one-line message that names the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from engine.model import hub
from engine.model.checkpoint import WEIGHTS_FILE, CheckpointError, check_tensors, load_config, load_model, \
    load_vocabulary, read_header
from engine.model.device import resolve
from engine.model.moondream import MoondreamModel
from engine.model.tokenizer import resolve_tokenizer
from engine.model.vocabulary import Vocabulary


@dataclass(frozen=True)
class ModelInfo:
    """What runs: the start-up line of the CLI and batch tool, and the UI header."""

    label: str                 # the local path, or `org/name@REV`
    directory: Path            # where the files are (the Hub cache's snapshot for a Hub id)
    tokenizer: str             # where the tokenizer came from
    parameters: int
    device: str
    dtype: str
    vocabulary: Vocabulary | None = None   # a narrow model's words (the embedded model's shapes and colours)

    def describe(self) -> str:
        return f"{self.label} · {format_count(self.parameters)} parameters · {self.device} · {self.dtype}"


def format_count(n: int) -> str:
    for scale, suffix in ((1e9, " B"), (1e6, " M"), (1e3, " k")):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(n)


def locate(weights: str | Path, revision: str | None = None) -> tuple[hub.Source, Path]:
    """(source, local checkpoint directory): a Hub id is downloaded (or found in the cache) first."""
    source = hub.parse_source(weights, revision)
    directory = hub.checkpoint_dir(source)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a checkpoint directory; pass a directory laid out like the official "
                              f"release, or a Hub id such as {hub.MOONDREAM2_ID}")
    if not (directory / WEIGHTS_FILE).is_file():
        raise CheckpointError(f"{directory}: no {WEIGHTS_FILE}")
    return source, directory


def check_pretrained(weights: str | Path, *, tokenizer: str | None = None, revision: str | None = None) -> ModelInfo:
    """Every check of `load_pretrained` that needs no tensor data: files, config, header, tokenizer."""
    source, directory = locate(weights, revision)
    config = load_config(directory)
    found = read_header(directory / WEIGHTS_FILE)
    check_tensors(found, config)
    _, tok_label = _tokenizer(tokenizer, directory, config)
    return ModelInfo(source.label, directory, tok_label, sum(math.prod(t.shape) for t in found.values()), "-", "-",
                     load_vocabulary(directory))


def load_pretrained(weights: str | Path, *, tokenizer: str | None = None, device: str = "auto", dtype: str = "auto",
                    revision: str | None = None, progress: bool = False
                    ) -> tuple[MoondreamModel, Tokenizer, ModelInfo]:
    """The model (on `device`, in `dtype`), its checked tokenizer, and what was loaded."""
    dev, dtype_name = resolve(device, dtype)      # before any download: a bad device fails at once
    source, directory = locate(weights, revision)
    config = load_config(directory)
    tok, tok_label = _tokenizer(tokenizer, directory, config)
    model = load_model(directory, dtype=dtype_name, device=dev, config=config, progress=progress)
    parameters = sum(p.numel() for p in model.parameters())
    info = ModelInfo(source.label, directory, tok_label, parameters, str(dev), dtype_name, load_vocabulary(directory))
    return model, tok, info


def _tokenizer(spec: str | None, directory: Path, config) -> tuple[Tokenizer, str]:
    try:
        return resolve_tokenizer(spec, directory, config)
    except CheckpointError:
        raise
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def add_model_arguments(parser) -> None:
    """`--weights`, `--tokenizer`, `--device`, `--dtype` on an argparse parser: the same flags and
    help in every command that loads a model (CLI, UI, batch tool, verify)."""
    from engine.model.device import DTYPE_CHOICES

    parser.add_argument("--weights", default=None, metavar="DIR|ID",
                        help=f"checkpoint directory or Hub id org/name[@REV], e.g. {hub.MOONDREAM2_ID} (pinned to "
                             f"{hub.DEFAULT_REVISIONS[hub.MOONDREAM2_ID]}); default: the embedded demo model")
    parser.add_argument("--tokenizer", default=None, metavar="PATH|ID",
                        help="tokenizer.json, or a Hub id (default: the weights' own if it is a starmie tokenizer, "
                             "else moondream/starmie-v1)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N (default auto)")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                        help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16 or fp16 (default auto)")

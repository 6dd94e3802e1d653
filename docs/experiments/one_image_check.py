"""Device check of the captured single-image prefill (ModelRunner._image_prefill): requests sent one at a
time, so every new image is prefilled alone, through engines with and without CUDA graphs and against the
reference decoder (PyTorch path), on the embedded model and on random Moondream 2 weights at 640×480.

    python docs/experiments/one_image_check.py        (CUDA only; exit 1 on a difference)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.model.image import load_image, overlap_crop_image  # noqa: E402
from engine.model.reference import reference_generate  # noqa: E402
from engine.serving.engine import Engine  # noqa: E402
from engine.serving.skills import prompt_ids  # noqa: E402


def _run(engine, image, skill, obj):
    h = engine.submit(image, skill, obj)
    while engine.step():
        pass
    return h.result()


def main() -> int:
    bad = 0
    samples = sorted((ROOT / "assets" / "samples").glob("*.png"))
    for dtype in ("fp32", "bf16"):
        graphs = Engine.from_pretrained(ROOT / "assets" / "model", device="cuda", dtype=dtype, prefix_cache_size=0)
        eager = Engine.from_pretrained(ROOT / "assets" / "model", device="cuda", dtype=dtype, prefix_cache_size=0,
                                       use_graphs=False)
        model, tok = graphs.model, graphs.tokenizer
        for path in samples:
            image = np.asarray(load_image(path))
            for skill, obj in (("detect", "circle"), ("point", "hexagon"), ("detect", "red square")):
                a, b = _run(graphs, image, skill, obj), _run(eager, image, skill, obj)
                ref = reference_generate(model, overlap_crop_image(load_image(path), model.config.vision),
                                         prompt_ids(model.config.tokens, lambda t: tok.encode(t).ids, skill, obj), skill, 10)
                same = a == b
                agrees = a == ref if dtype == "fp32" else len(a[next(iter(a))]) == len(ref[next(iter(ref))])
                bad += not (same and agrees)
                print(f"{dtype} {path.name} {skill} {obj!r}: graphs == eager {same}, vs reference {'identical' if a == ref else ('same count' if agrees else 'DIFFERS')}")
    print("FAIL" if bad else "PASS", bad, "differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The fp32 half of one_image_check.py without a GPU (session 44): the embedded model's engine on the fused Triton
kernels, run by Triton's CPU interpreter (the text prefix on `bidirectional_attention`), eager, against the reference
decoder (PyTorch path), on the first N sample images × (detect circle, point hexagon, detect red square).
Answers must be identical. 30–50 s a request on the shared 2-core machine.

    TRITON_INTERPRET=1 python docs/experiments/one_image_interpreted.py N        (exit 1 on a difference)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.model.image import load_image, overlap_crop_image  # noqa: E402
from engine.model.reference import reference_generate  # noqa: E402
from engine.serving.engine import Engine  # noqa: E402
from engine.serving.skills import prompt_ids  # noqa: E402


def main(n: int) -> int:
    torch.set_num_threads(1)
    engine = Engine.from_pretrained(ROOT / "assets" / "model", device="cpu", dtype="fp32", prefix_cache_size=0,
                                    kernels="triton", use_graphs=False)
    model, tok = engine.model, engine.tokenizer
    bad = 0
    for path in sorted((ROOT / "assets" / "samples").glob("*.png"))[:n]:
        image = np.asarray(load_image(path))
        for skill, obj in (("detect", "circle"), ("point", "hexagon"), ("detect", "red square")):
            start = time.time()
            h = engine.submit(image, skill, obj)
            while engine.step():
                pass
            got = h.result()
            ref = reference_generate(model, overlap_crop_image(load_image(path), model.config.vision),
                                     prompt_ids(model.config.tokens, lambda t: tok.encode(t).ids, skill, obj), skill, 10)
            bad += got != ref
            print(path.name, skill, obj, "identical" if got == ref else f"DIFFERS {got} {ref}",
                  f"{time.time() - start:.0f}s", flush=True)
    print("FAIL" if bad else "PASS", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1])))

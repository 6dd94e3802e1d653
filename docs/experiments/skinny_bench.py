"""Run a module's command line with `SKINNY_SHAPES` taken from a `skinny_gemm_check.py --json` report
(its winners), so the engine can be measured with the swept shapes in the same device call.

    python3 docs/experiments/skinny_bench.py REPORT.json engine.bench --device cuda --batch 1,32,64
    python3 docs/experiments/skinny_bench.py REPORT.json docs/experiments/one_image_check.py
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from run_module import run  # noqa: E402

from engine.kernels import skinny  # noqa: E402
from engine.kernels.skinny import SkinnyShape  # noqa: E402

D, F = 2048, 8192
report, module, *rest = sys.argv[1:]
with open(report) as f:
    winners = json.load(f)["winners"]
for key, shape in winners.items():
    name, rows = key.split("-")
    n, k = (3 * D + F, D) if name == "in" else (D, D + F)
    skinny.SKINNY_SHAPES[(n, k)] = SkinnyShape(*shape)  # one shape per matrix: the last row count's winner
print("SKINNY_SHAPES:", skinny.SKINNY_SHAPES, flush=True)
run(module, rest)

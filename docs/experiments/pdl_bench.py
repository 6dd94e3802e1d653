"""Run a module's command line with programmatic dependent launch on or off (`engine.kernels.decode.PDL`),
so that both can be compared in one device call (session 46).

    python3 docs/experiments/pdl_bench.py 0|1 engine.bench --device cuda --batch 1,32,64
    python3 docs/experiments/pdl_bench.py 1 docs/experiments/one_image_check.py

Session 46's first call (`session46_calls.sh pdl`) ran a revision that also took an L2 prefetch of the
projections' first K slices (`PREFETCH` in `skinny_linear`, set by a second argument here); it gained
nothing and was removed, so its `pdl-2` / `pdl-4` rows cannot be re-run from this tree.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from run_module import run  # noqa: E402

from engine.kernels import decode  # noqa: E402

on, module, *rest = sys.argv[1:]
decode.PDL = on == "1"
print("PDL:", decode.PDL, flush=True)
run(module, rest)

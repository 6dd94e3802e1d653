"""The command line every blind scene generator shares (`python docs/experiments/NAME_scenes.py [--seed S] [--n N]
[--out DIR]`): draw N scenes of one seed, save them as PNGs under DIR when given, and print the time taken and the
attempts per scene. `scene_fn(seed, i)` returns (scene, query, attempts)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np


def sample(scene_fn: Callable[[int, int], tuple[Any, Any, int]], doc: str, default_seed: int,
           argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--seed", type=int, default=default_seed)
    ap.add_argument("--n", type=int, default=21)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    t0 = time.time()
    tries = []
    for i in range(args.n):
        scene, _, attempts = scene_fn(args.seed, i)
        tries.append(attempts)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            scene.image.save(f"{args.out}/{i:04d}-{scene.background}.png")
    print(f"{args.n} scenes in {time.time() - t0:.1f} s, mean attempts {np.mean(tries):.2f}, max {max(tries)}")

"""Which way of keeping every parameter in DDP's gradient reduction is cheaper, measured:

    torchrun --standalone --nproc-per-node 2 -m engine.ddp_unused [--point-frac 1.0] [--reps 300]

A data-parallel step needs a gradient for every parameter on every rank, but a batch without size
targets (or without any coordinate target) leaves the size head (or the coordinate head and the
probes) out of the loss. Two cures: DDP's `find_unused_parameters=True` (walks the autograd graph
each step) or `compute_losses(touch_all=True)` (runs those heads on one row with weight 0, only
when the batch lacks their targets). Both run here side by side on two copies of the tiny preset,
alternating step by step on the same batches (CPU, gloo), and the median forward + backward time
of each and of their paired difference is printed. `--point-frac 1` makes every batch size-free
(the case touch_all pays for); 0.5 is the training mix.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from engine.model.config import PRESETS
from engine.training import train as T
from engine.training.vocab import build_tokenizer

SCENES = {"min_objects": 1, "max_objects": 5, "size_range": (96, 112)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="torchrun --standalone --nproc-per-node 2 -m engine.ddp_unused",
                                description=__doc__.splitlines()[0])
    p.add_argument("--point-frac", dest="point_frac", type=float, default=1.0, help="share of point sequences (no sizes)")
    p.add_argument("--reps", type=int, default=300, help="steps of each variant")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = PRESETS[a.preset]
    recipe = {**T.RECIPE, "point_frac": a.point_frac}
    prompts = T.prompt_table(config, build_tokenizer(vocab_size=min(512, config.text.vocab_size)))
    cpu = torch.device("cpu")
    batches = [T.to_device({k: torch.from_numpy(v) for k, v in T.make_batch(
        config, prompts, 11, T.stream_index(i, rank, world), batch=2, queries=2, point_frac=a.point_frac,
        scene_kw=SCENES).items()}, cpu) for i in range(8)]
    model, probes = T.init_model(config, 0, recipe), T.Probes(config.text.dim)
    touch = DistributedDataParallel(T.LossModule(model, probes, recipe, touch_all=True))
    find = DistributedDataParallel(T.LossModule(copy.deepcopy(model), copy.deepcopy(probes), recipe, touch_all=False),
                                   find_unused_parameters=True)
    times: dict[str, list[float]] = {"touch": [], "find": []}
    for it in range(a.reps):
        batch, meta = batches[it % len(batches)]
        order = (("touch", touch), ("find", find)) if it % 2 else (("find", find), ("touch", touch))
        for name, net in order:
            dist.barrier()
            t0 = time.perf_counter()
            net.zero_grad(set_to_none=True)
            net(batch, meta, 0.5)["loss"].backward()
            times[name].append(time.perf_counter() - t0)
    if rank == 0:
        t = {k: np.array(v[10:]) * 1e3 for k, v in times.items()}
        size_free = sum(m["n_sizes"] == 0 for _, m in batches)
        print(f"{world} ranks, {a.preset}, point_frac {a.point_frac}: {size_free}/{len(batches)} of rank 0's batches "
              f"without sizes; forward+backward median: touch_all {np.median(t['touch']):.2f} ms, find_unused "
              f"{np.median(t['find']):.2f} ms; median paired difference (find - touch) {np.median(t['find'] - t['touch']):+.2f} ms")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

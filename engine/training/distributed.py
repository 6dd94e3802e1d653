"""Data-parallel training over the GPUs of one host: the ranks, and what they must agree on.

    torchrun --standalone --nproc-per-node N -m engine.train --out DIR ...

torchrun starts one process per GPU and sets RANK / WORLD_SIZE / LOCAL_RANK (and the rendezvous
address); `Ranks.from_env` joins the process group from them (NCCL on CUDA, gloo on the CPU).
Without those variables, or with WORLD_SIZE 1, it is a single process and nothing here runs a
collective, so a plain `python -m engine.train` behaves exactly as before.

What the ranks agree on, and how (`Ranks.agree`): every `SYNC_EVERY` steps, at the top of the
step, one all-reduce (MAX) of three numbers:
    stop   any rank's stop request (SIGTERM / Ctrl-C set a flag; rank 0 adds "deadline passed")
    total  rank 0's calibrated step total (0 until it has one)
    now    rank 0's clock, which the learning-rate schedule reads until the next agreement
so every rank stops at the same step, runs the same total and computes the same learning rate
(the schedule's time term must not read each rank's own clock, or the weights would drift apart).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

SYNC_EVERY = 10          # steps between agreements (one small all-reduce each)
STOP_NONE, STOP_TIME, STOP_INTERRUPTED = 0, 1, 2
STOP_REASONS = {STOP_TIME: "time", STOP_INTERRUPTED: "interrupted"}


@dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    stop_requested: bool = False          # set by the signal handler (`catch_signals`)

    @property
    def parallel(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        """Rank 0: the only one that logs, writes checkpoints and runs the held-out check."""
        return self.rank == 0

    @classmethod
    def from_env(cls, device: torch.device) -> "Ranks":
        """Join torchrun's process group when its variables say there are several ranks.
        On CUDA each rank takes the GPU of its LOCAL_RANK."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(device=device)
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        if device.type == "cuda":
            if local >= torch.cuda.device_count():
                raise RuntimeError(f"rank {rank} wants GPU {local} but {torch.cuda.device_count()} are visible; "
                                   f"start at most that many ranks (--nproc-per-node)")
            device = torch.device("cuda", local)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world,
                                    device_id=device if device.type == "cuda" else None)
        return cls(rank=rank, world=world, local_rank=local, device=device)

    def catch_signals(self) -> dict:
        """SIGTERM and SIGINT set `stop_requested` instead of raising mid-step: a rank that left the
        loop on its own would leave the others waiting in a collective. Returns the old handlers."""
        def request(signum, frame) -> None:
            self.stop_requested = True
        return {s: signal.signal(s, request) for s in (signal.SIGTERM, signal.SIGINT)}

    def shared(self, value: float) -> float:
        """Rank 0's `value` on every rank."""
        if not self.parallel:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(t, src=0)
        return float(t.item())

    def agree(self, stop: int, total: int, now: float) -> tuple[int, int, float]:
        """(stop, total, now) as every rank must use them: the largest stop request, rank 0's
        total and clock (the other ranks' total and clock are ignored)."""
        if not self.parallel:
            return stop, total, now
        mine = [float(stop), float(total), now] if self.main else [float(stop), 0.0, 0.0]
        t = torch.tensor(mine, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        s, n, clock = t.tolist()
        return int(s), int(n), clock

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise mean over the ranks (log lines report every rank's batches)."""
        if not self.parallel:
            return values
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values / self.world

    def barrier(self) -> None:
        if self.parallel:
            dist.barrier()

    def close(self) -> None:
        if self.parallel and dist.is_initialized():
            dist.destroy_process_group()


def workers_per_rank(cores: int, world: int) -> int:
    """Data workers of one rank on CUDA: the host's cores less two, split between the ranks, ≤ 14."""
    return max(1, min(14, (cores - 2) // max(1, world)))

"""One rank of a data-parallel training run for tests/test_train.py, started by torchrun:

    torchrun --standalone --nproc-per-node 2 tests/ddp_child.py OUT RECORDS MODE

Trains the tiny preset on the CPU (gloo) with --minutes (rank 0 calibrates the step total) and
writes RECORDS/rank<r>.json: a digest of every parameter after each step, a digest of each
step's batch, which ranks wrote a checkpoint, and the Result. With MODE "interrupt" rank 1 alone
receives SIGTERM after step 33 (the ranks must still stop together).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.training import train as T  # noqa: E402

SCENES = {"min_objects": 1, "max_objects": 5, "size_range": (96, 112)}


def digest(tensors) -> str:
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main(out: str, records: str, mode: str) -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    params, batches, writes = [], [], []

    def on_step(step, model, batch):
        params.append(digest(model.parameters()))
        batches.append(digest([batch["crops"], batch["tok"]]))
        if mode == "interrupt" and rank == 1 and step == 33:
            os.kill(os.getpid(), signal.SIGTERM)

    write = T.write_checkpoint

    def recording_write(*a, **kw):
        writes.append(rank)
        return write(*a, **kw)

    T.write_checkpoint = recording_write
    # far deadline, short calibration: the total is rank 0's measurement, capped by `steps`
    result = T.train(out, preset="tiny", device="cpu", workers=0, quiet=True, batch=2, queries=2, lr=3e-3, warmup=2,
                     log_every=1, save_every=1e9, heldout=0, scene=SCENES, seed=11, on_step=on_step,
                     steps=60, minutes=10, calibrate_s=0.5)
    Path(records, f"rank{rank}.json").write_text(json.dumps(
        {"params": params, "batches": batches, "writes": writes, "steps": result.steps,
         "losses": [h["loss"] for h in result.history]}))


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""Compute and copy streams, and events — real on CUDA, synchronous no-ops on the CPU.

On the CPU every operation has finished when it returns, so an event that records nothing
and waits for nothing keeps exactly the same ordering guarantees: the engine runs the same
code path on both devices.
"""

from __future__ import annotations

import contextlib

import torch


class NullEvent:
    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class Streams:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.compute = torch.cuda.Stream(device) if self.cuda else None
        self.copy = torch.cuda.Stream(device) if self.cuda else None

    def event(self):
        # Blocking-sync events: a CPU wait sleeps instead of spinning a core (a Kestrel weak spot).
        return torch.cuda.Event(blocking=True) if self.cuda else NullEvent()

    def on_compute(self):
        return torch.cuda.stream(self.compute) if self.cuda else contextlib.nullcontext()

    def on_copy(self):
        return torch.cuda.stream(self.copy) if self.cuda else contextlib.nullcontext()

    def pinned(self, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, pin_memory=self.cuda)

    def upload(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        """`host` on `device`, queued on the current stream without blocking the CPU. A pageable
        source would make torch wait for the stream to drain first (the whole queued forward);
        a pinned copy (the caching host allocator keeps it until the copy is done) does not."""
        if not self.cuda:
            return host.to(device)
        return host.pin_memory().to(device, non_blocking=True)

    def synchronize(self) -> None:
        if self.cuda:
            self.compute.synchronize()
            self.copy.synchronize()

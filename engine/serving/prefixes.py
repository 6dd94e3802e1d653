"""`PrefixSlots`: which image each slot of the runner's shared prefix store holds (CPU bookkeeping).

Every image prefix lives once on the device (`engine.model.text.SharedPrefix`), in a slot; the
KV rows of every request for that image read it there. A slot is *referenced* by the running
requests that read it (released with their KV row) and stays *cached* after them, least recently
used first out, up to `capacity` unreferenced prefixes: a later request for the same pixels then
skips the vision encoder and the prefix prefill. With `slots = rows + capacity` a new image
always finds a slot: at most rows − 1 slots are referenced by other rows when it is admitted.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixSlots:
    def __init__(self, slots: int, capacity: int) -> None:
        self.capacity = capacity
        self.free = list(range(slots - 1, -1, -1))
        self.slot_of: dict[str, int] = {}      # image key → slot holding its prefix (written or queued)
        self.key_of: dict[int, str] = {}
        self.refs = [0] * slots
        self.idle: OrderedDict[str, None] = OrderedDict()  # unreferenced cached keys, least recent first

    def get(self, key: str) -> int | None:
        """The slot holding `key`'s prefix, or None (the image must be encoded)."""
        slot = self.slot_of.get(key)
        if slot is not None and key in self.idle:
            self.idle.move_to_end(key)
        return slot

    def __contains__(self, key: str) -> bool:  # any thread; changes nothing
        return key in self.slot_of

    def __len__(self) -> int:
        return len(self.slot_of)

    def acquire(self, key: str) -> int:
        """A slot for a new image's prefix, referenced once; the least recently used unreferenced
        prefix gives its slot up if none is free."""
        if key in self.slot_of:
            raise ValueError(f"image {key[:12]} already has a prefix slot")
        if not self.free:
            if not self.idle:
                raise RuntimeError("no free image-prefix slot: every slot is read by a running request")
            self._evict(next(iter(self.idle)))
        slot = self.free.pop()
        self.slot_of[key], self.key_of[slot] = slot, key
        self.refs[slot] = 1
        return slot

    def ref(self, slot: int) -> None:
        if self.refs[slot] == 0:
            self.idle.pop(self.key_of[slot], None)
        self.refs[slot] += 1

    def unref(self, slot: int) -> None:
        self.refs[slot] -= 1
        if self.refs[slot] == 0:
            self.idle[self.key_of[slot]] = None
            while len(self.idle) > self.capacity:
                self._evict(next(iter(self.idle)))

    def _evict(self, key: str) -> None:
        del self.idle[key]
        slot = self.slot_of.pop(key)
        del self.key_of[slot]
        self.free.append(slot)

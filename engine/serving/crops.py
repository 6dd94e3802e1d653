"""`CropService`: overlap crops made off the engine thread, once per image, only when needed.

`Engine.submit` decodes the image and hashes its pixels in the caller's thread; it asks for
crops only if the image's prefix is not cached. Crops run on a small thread pool (the resize
releases the GIL), so neither the caller nor the engine's step loop waits for them; requests
for an image whose crops are already being made share that work. The scheduler admits a
request that needs crops only once they are ready (`Future.done()`); a request whose prefix
is cached by then never looks at them.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np
from PIL import Image

from engine.model.config import VisionConfig
from engine.model.image import overlap_crop_image


def image_key(picture: Image.Image) -> str:
    """The prefix-cache key of a decoded RGB image: a hash of its pixels and size."""
    pixels = np.asarray(picture)
    digest = hashlib.blake2b(pixels.data if pixels.flags.c_contiguous else pixels.tobytes(), digest_size=20)
    digest.update(repr(picture.size).encode())
    return digest.hexdigest()


class CropService:
    def __init__(self, vision: VisionConfig, threads: int, on_ready: Callable[[], None] = lambda: None) -> None:
        self.vision = vision
        self.threads = threads
        self.on_ready = on_ready
        self.pool: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        # Only requests hold these futures: an image's entry lives as long as one of them needs it.
        self.pending: weakref.WeakValueDictionary[str, Future] = weakref.WeakValueDictionary()

    def request(self, key: str, picture: Image.Image) -> Future:
        """The crops of `picture` (a Future of `OverlapCrops`), shared with every request for `key`."""
        with self.lock:
            future = self.pending.get(key)
            if future is None:
                if self.pool is None:
                    self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="crops")
                future = self.pool.submit(overlap_crop_image, picture, self.vision)
                future.add_done_callback(lambda _: self.on_ready())
                self.pending[key] = future
            return future

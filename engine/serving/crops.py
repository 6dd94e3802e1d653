"""`CropService`: overlap crops made off the engine thread, once per image, only when needed.

`Engine.submit` decodes the image and hashes its pixels in the caller's thread (`decode_image`);
it asks for crops only if the image's prefix is not cached. Crops run on a small thread pool (the resize
releases the GIL), so neither the caller nor the engine's step loop waits for them; requests
for an image whose crops are already being made share that work. The scheduler admits a
request that needs crops only once they are ready (`Future.done()`); a request whose prefix
is cached by then never looks at them. With `on_device` (the engine's default on CUDA) a thread
only hands over the pixels with their resize plans built; the runner makes the crops on the GPU
(`engine.model.resize`: libvips' pixels, about 1 ms of GPU and host time for 640×480 on an H200).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image

from engine.model.config import VisionConfig
from engine.model.image import MAX_PIXELS, ImageSource, load_image, overlap_crop_image, prepare_overlap_crops


def pixel_key(pixels: bytes | memoryview, size: tuple[int, int]) -> str:
    """The prefix-cache key of RGB pixels (row-major uint8 HxWx3 bytes) of `size` (width, height)."""
    digest = hashlib.sha256(pixels)  # hashlib releases the GIL while it hashes
    digest.update(repr(tuple(size)).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class DecodedImage:
    """An image decoded and keyed once (`prepare_image`): `Engine.submit` takes it as it is, so a
    server that sees the same file again skips the decode and the pixel hash. Read-only."""

    key: str                            # the prefix-cache key of `pixels` (pixel_key)
    pixels: Image.Image | np.ndarray    # RGB


def prepare_image(source: ImageSource) -> DecodedImage:
    """Decode and key `source` now (in this thread), for one or many later `Engine.submit` calls."""
    return DecodedImage(*decode_image(source))


def decode_image(source: ImageSource | DecodedImage,
                 known: weakref.WeakValueDictionary | None = None) -> tuple[str, Image.Image | np.ndarray]:
    """(prefix-cache key, pixels) of a request's image, in the caller's thread.

    A `DecodedImage` is used as it is. An RGB uint8 array is copied (the caller may reuse it) and
    the copy hashed; anything else goes through `load_image` (decode, EXIF, RGB). Both give the
    same key for the same pixels. `known` ({key: pixels} of earlier calls, kept while requests
    hold them): an array whose pixels are there is hashed in place and shares that copy, since
    copying a large array holds the interpreter lock (and on some hosts faults in fresh pages).
    """
    if isinstance(source, DecodedImage):
        return source.key, source.pixels
    if (isinstance(source, np.ndarray) and source.dtype == np.uint8 and source.ndim == 3 and source.shape[2] == 3
            and 0 < source.shape[0] * source.shape[1] <= MAX_PIXELS):
        size = (source.shape[1], source.shape[0])
        if known is not None and source.flags.c_contiguous:
            key = pixel_key(source.data, size)
            same = known.get(key)
            if same is not None:
                return key, same
        pixels = np.array(source, order="C")  # [H, W, 3]
        key = pixel_key(pixels.data, size)
        if known is not None:
            known[key] = pixels
        return key, pixels
    picture = load_image(source)
    return pixel_key(picture.tobytes(), picture.size), picture


def pixels_for_device(picture: Image.Image | np.ndarray, vision: VisionConfig) -> np.ndarray:
    """A crop thread's share of crops made on the device: the pixels as a uint8 [H, W, 3] array and
    the size's resize plans built (`prepare_overlap_crops`); the runner resizes on its device."""
    pixels = np.require(np.asarray(picture, dtype=np.uint8), requirements=["C", "W"])  # torch wants writable
    prepare_overlap_crops(pixels.shape[0], pixels.shape[1], vision)
    return pixels


class CropService:
    """`on_device`: the crops themselves are made by the runner on its device (a GPU), from the pixels
    this service hands over with their resize plans ready (`pixels_for_device`), instead of here."""

    def __init__(self, vision: VisionConfig, threads: int, on_ready: Callable[[], None] = lambda: None,
                 on_device: bool = False) -> None:
        self.vision = vision
        self.on_device = on_device
        self.threads = threads
        self.on_ready = on_ready
        self.pool: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        # Only requests hold these futures: an image's entry lives as long as one of them needs it.
        self.pending: weakref.WeakValueDictionary[str, Future] = weakref.WeakValueDictionary()

    def request(self, key: str, picture: Image.Image) -> Future:
        """The crops of `picture` (a Future of `OverlapCrops`, or with `on_device` of its pixels
        array), shared with every request for `key`."""
        with self.lock:
            future = self.pending.get(key)
            if future is None:
                if self.pool is None:
                    self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="crops")
                job = pixels_for_device if self.on_device else overlap_crop_image
                future = self.pool.submit(job, picture, self.vision)
                future.add_done_callback(lambda _: self.on_ready())
                self.pending[key] = future
            return future

"""`ImageCache`: a request's `image_url` → the engine's `DecodedImage`, decoded once per distinct file.

The server runs in the engine's process, so its GIL-holding work slows the engine's step loop.
A data URL is keyed by the SHA-256 of its base64 text (hashlib releases the GIL); a key seen
before gives back the image decoded then, skipping base64, JPEG decode and the pixel hash.
A new one is decoded by `pybase64` (SIMD) and `prepare_image` (Pillow's decoder and hashlib
release the GIL), the same pixels and prefix-cache key `Engine.submit` makes of the same file.
`ImageCache.lookup` only hashes, so the event loop may call it: a kept image is then submitted
without leaving the loop; `ImageCache.get` (and `lookup`'s decoder) runs off it, on a worker thread.
"""

from __future__ import annotations

import binascii
import hashlib
import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

from engine import DecodedImage, prepare_image

try:
    import pybase64 as b64
except ImportError:  # pragma: no cover - a dependency; the standard library decodes the same, slower
    import base64 as b64


class BadImageURL(ValueError):
    """`image_url` is not a base64 data URL; the message is the one-line reason for the client."""


def data_url_payload(value: object) -> str:
    """The base64 text of a `data:image/...;base64,...` URL (the client's `image_url`)."""
    if not isinstance(value, str) or not value:
        raise BadImageURL("image_url is missing: send the image as a data URL (data:image/jpeg;base64,...)")
    header, sep, payload = value.partition(",")
    if not sep or not header.startswith("data:") or ";base64" not in header:
        raise BadImageURL("image_url must be a base64 data URL (data:image/jpeg;base64,...); "
                          "remote URLs are not fetched")
    return payload


def decode_payload(payload: str) -> bytes:
    try:
        return b64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadImageURL("image_url holds invalid base64 data; encode the image file with base64") from None


def payload_digest(payload: str) -> bytes:
    """The cache key of a data URL's base64 text (SHA-256; hashlib releases the GIL)."""
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).digest()


def pixel_bytes(image: DecodedImage) -> int:
    """Memory of an image's RGB pixels (a PIL image or an HxWx3 uint8 array)."""
    if isinstance(image.pixels, np.ndarray):
        return image.pixels.nbytes
    width, height = image.pixels.size
    return width * height * 3


class ImageCache:
    """LRU of recent distinct images holding at most `max_bytes` of RGB pixels (0: decode every
    time; an image larger than the whole budget is not kept), any thread."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[bytes, DecodedImage] = OrderedDict()
        self.sizes: dict[bytes, int] = {}
        self.held = 0  # bytes of pixels in `entries`
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, image_url: object) -> DecodedImage:
        """The decoded image of `image_url`; raises BadImageURL, or ImageError for a bad file."""
        payload = data_url_payload(image_url)
        return self.get_or_decode(payload_digest(payload), lambda: decode_payload(payload))

    def lookup(self, image_url: object) -> tuple[DecodedImage | None, Callable[[], DecodedImage]]:
        """(the image of `image_url` if it is kept, else None; a call that decodes and keeps it, to
        run off the event loop). Only hashes the data URL (hashlib releases the GIL); raises BadImageURL."""
        payload = data_url_payload(image_url)
        digest = payload_digest(payload)
        return self.cached(digest), lambda: self.get_or_decode(digest, lambda: decode_payload(payload))

    def cached(self, digest: bytes) -> DecodedImage | None:
        """The image kept under `digest` (`payload_digest`), or None."""
        with self.lock:
            image = self.entries.get(digest)
            if image is not None:
                self.entries.move_to_end(digest)
                self.hits += 1
            return image

    def get_or_decode(self, digest: bytes, raw: Callable[[], bytes]) -> DecodedImage:
        """The image kept under `digest`, else `raw()` (the encoded file) decoded, keyed and kept."""
        image = self.cached(digest)
        if image is not None:
            return image
        with self.lock:
            self.misses += 1
        image = prepare_image(raw())
        size = pixel_bytes(image)
        if size <= self.max_bytes:
            with self.lock:
                if digest not in self.entries:
                    self.entries[digest], self.sizes[digest] = image, size
                    self.held += size
                while self.held > self.max_bytes:
                    old, _ = self.entries.popitem(last=False)
                    self.held -= self.sizes.pop(old)
        return image

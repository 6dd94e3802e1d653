"""`ImageCache`: a request's `image_url` → the engine's `DecodedImage`, decoded once per distinct file.

The server runs in the engine's process, so its GIL-holding work slows the engine's step loop.
A data URL is keyed by the SHA-256 of its base64 text (hashlib releases the GIL); a key seen
before gives back the image decoded then, skipping base64, JPEG decode and the pixel hash.
A new one is decoded by `pybase64` (SIMD) and `prepare_image` (Pillow's decoder and hashlib
release the GIL), the same pixels and prefix-cache key `Engine.submit` makes of the same file.
Call `ImageCache.get` off the event loop (a worker thread).
"""

from __future__ import annotations

import binascii
import hashlib
import threading
from collections import OrderedDict

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


class ImageCache:
    """LRU of the last `capacity` distinct images (0: decode every time), any thread."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[bytes, DecodedImage] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, image_url: object) -> DecodedImage:
        """The decoded image of `image_url`; raises BadImageURL, or ImageError for a bad file."""
        payload = data_url_payload(image_url)
        digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).digest()
        with self.lock:
            image = self.entries.get(digest)
            if image is not None:
                self.entries.move_to_end(digest)
                self.hits += 1
                return image
            self.misses += 1
        image = prepare_image(decode_payload(payload))
        if self.capacity > 0:
            with self.lock:
                self.entries[digest] = image
                while len(self.entries) > self.capacity:
                    self.entries.popitem(last=False)
        return image

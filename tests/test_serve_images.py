"""`app.serve_images.ImageCache`: a repeated data URL skips its decode; a new one decodes to the same
pixels and prefix-cache key as the in-process path; bad URLs fail with one line."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from app.serve_images import BadImageURL, ImageCache
from engine import DecodedImage, Engine, ImageError, prepare_image
from engine.serving.crops import decode_image
from tests.conftest import random_image


def encoded(seed: int, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(random_image(seed, 40, 60)).save(buf, format=fmt)
    return buf.getvalue()


def data_url(data: bytes, kind: str = "jpeg") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


PIXELS = 40 * 60 * 3  # bytes of one test image's pixels


def test_same_url_decodes_once_and_keys_as_the_engine_does():
    cache = ImageCache(max_bytes=4 * PIXELS)
    jpeg = encoded(1)
    first = cache.get(data_url(jpeg))
    again = cache.get(data_url(jpeg))
    assert again is first and (cache.hits, cache.misses) == (1, 1)
    key, pixels = decode_image(jpeg)  # what Engine.submit makes of the file's bytes
    assert first.key == key
    assert np.array_equal(np.asarray(first.pixels), np.asarray(pixels))


@pytest.mark.parametrize("fmt,kind", [("PNG", "png"), ("JPEG", "jpeg")])
def test_new_urls_miss_and_the_oldest_is_evicted(fmt, kind):
    cache = ImageCache(max_bytes=2 * PIXELS)
    urls = [data_url(encoded(seed, fmt), kind) for seed in range(3)]
    images = [cache.get(url) for url in urls]
    assert len({image.key for image in images}) == 3 and cache.misses == 3
    assert cache.get(urls[2]) is images[2]           # kept
    assert cache.get(urls[0]) is not images[0]       # evicted, decoded again
    assert cache.get(urls[0]).key == images[0].key
    assert (cache.hits, cache.misses) == (2, 4)
    assert cache.held == 2 * PIXELS and len(cache.entries) == 2


@pytest.mark.parametrize("budget", [0, PIXELS - 1])
def test_an_image_over_the_budget_is_not_kept(budget):
    cache = ImageCache(max_bytes=budget)
    url = data_url(encoded(2))
    assert cache.get(url) is not cache.get(url) and cache.misses == 2 and cache.held == 0


@pytest.mark.parametrize("url,words", [
    (None, "image_url is missing"),
    ("", "image_url is missing"),
    ("http://example.com/cat.jpg", "remote URLs are not fetched"),
    ("data:image/jpeg;base64,@@@not base64@@@", "invalid base64"),
    ("data:image/jpeg;base64,caf\u00e9", "invalid base64"),
])
def test_bad_urls_fail_with_one_line(url, words):
    with pytest.raises(BadImageURL) as e:
        ImageCache().get(url)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_bad_file_is_an_image_error_and_is_not_cached():
    cache = ImageCache()
    url = data_url(b"not an image at all")
    for _ in range(2):
        with pytest.raises(ImageError):
            cache.get(url)
    assert cache.hits == 0 and len(cache.entries) == 0


def test_engine_answers_a_decoded_image_as_it_answers_its_file(tiny_model64, tokenizer):
    png = encoded(3, "PNG")
    image = prepare_image(png)
    assert isinstance(image, DecodedImage)
    engine = Engine(tiny_model64, tokenizer, max_batch=4, prefix_cache_size=0)
    from_file = engine.submit(png, "detect", "blue", max_objects=2)
    decoded = engine.submit(image, "detect", "blue", max_objects=2)
    again = engine.submit(image, "point", "star", max_objects=2)
    reference = engine.submit(random_image(3, 40, 60), "point", "star", max_objects=2)  # PNG is lossless
    engine.run_until_idle()
    assert decoded.result() == from_file.result()
    assert again.result() == reference.result()
    assert from_file.seq.image_key == decoded.seq.image_key == reference.seq.image_key

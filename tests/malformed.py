"""A corpus of malformed, hostile and merely unusual image files, generated (never checked in).

    python tests/malformed.py OUT_DIR        # writes the corpus and OUT_DIR/manifest.json

or, from a test::

    items = generate(tmp_path / "corpus")    # list[Item], every file written under that folder

Every item has a file name with an image suffix (so `app.batch` picks it up) and an expectation:

* ``"error"``: every entry point must answer with one clear line (ImageError in the API, a
  per-item error record in app.batch, ``error: …`` + exit 2 on the CLI, gr.Error in the UI);
* ``"ok"``: a valid but unusual image (1×1, 20000×20, CMYK, 16-bit, palette, LA/RGBA,
  EXIF-rotated, animated, wrong extension, …) that must load, at ``size`` (width, height)
  after EXIF rotation and, where ``pixel`` is set, with that RGB value at ``pixel[0]`` (x, y);
* ``"either"``: damage Pillow may or may not notice (a flipped byte, a cut that only loses a
  trailer): an image or a clear error are both fine, a traceback or a hang is not.

Kinds (``Item.kind``) group the items; ``sample(items)`` picks one item per kind for the
slower entry points (CLI subprocesses, the UI). Everything is deterministic for a given seed.
Files that are not regular files (a directory named like an image, a FIFO, dangling and looping
symlinks) are made only where the platform supports them; a chmod-000 file is expected to fail
only when the current user really cannot read it (root can).
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["Item", "generate", "sample", "KINDS_NOT_REGULAR"]

#: kinds whose entry is not a regular file (app.batch still records them, as errors)
KINDS_NOT_REGULAR = ("dir-named-image", "fifo", "dangling-symlink", "symlink-loop")


@dataclass(frozen=True)
class Item:
    name: str  # path relative to the corpus folder
    kind: str
    expect: str  # "error" | "ok" | "either"
    size: tuple[int, int] | None = None  # (width, height) of the loaded image, for "ok"
    pixel: tuple[tuple[int, int], tuple[int, int, int]] | None = None  # ((x, y), rgb) after loading, approx.
    note: str = ""


# ---- encoders ---------------------------------------------------------------------------------

def _noise(h: int, w: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)


def _smooth(h: int, w: int, seed: int) -> np.ndarray:
    """A gradient with some noise: compresses like a photo (not to nothing, not incompressible)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(1, w - 1), y * 255 // max(1, h - 1), (x + y) * 127 // max(1, w + h - 2)], -1)
    return np.clip(base + rng.integers(-20, 21, (h, w, 3)), 0, 255).astype(np.uint8)


def _encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(width: int, height: int, bit_depth: int, colour_type: int, idat: bytes, *, extra: bytes = b"") -> bytes:
    """A PNG from already-compressed IDAT data (any declared size: bombs included)."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + extra + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _zeros_compressed(row_bytes: int, rows: int) -> bytes:
    """zlib of `rows` PNG scanlines of zeros (filter byte 0 + row_bytes zeros), streamed."""
    comp = zlib.compressobj(9)
    line = b"\x00" * (row_bytes + 1)
    chunk = line * max(1, (1 << 20) // len(line))
    per = len(chunk) // len(line)
    out, left = [], rows
    while left > 0:
        n = min(per, left)
        out.append(comp.compress(chunk if n == per else line * n))
        left -= n
    out.append(comp.flush())
    return b"".join(out)


def _png_chunk_ends(data: bytes) -> dict[bytes, list[int]]:
    """Byte offset just after each chunk, by chunk type."""
    ends: dict[bytes, list[int]] = {}
    pos = 8
    while pos + 8 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        pos += 12 + n
        ends.setdefault(kind, []).append(pos)
    return ends


def _offsets(lo: int, hi: int, n: int) -> list[int]:
    """n distinct offsets spread over [lo, hi), both ends included where possible."""
    if hi <= lo:
        return []
    return sorted({int(v) for v in np.linspace(lo, hi - 1, n)})


# ---- the corpus -------------------------------------------------------------------------------

def generate(dest: str | Path, *, seed: int = 0) -> list[Item]:
    """Write the corpus under `dest` (created; must be empty or absent) and return its items."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    items: list[Item] = []

    def put(name: str, data: bytes, kind: str, expect: str, **kw) -> None:
        (dest / name).write_bytes(data)
        items.append(Item(name, kind, expect, **kw))

    # -- truncations at many offsets -----------------------------------------------------------
    photo = Image.fromarray(_smooth(40, 56, seed))
    png = _encode(photo, "PNG")
    idat_end = _png_chunk_ends(png)[b"IDAT"][-1]
    for cut in _offsets(1, idat_end - 12, 40):  # well inside the pixel data (not just its checksums)
        put(f"trunc_png_{cut:05d}.png", png[:cut], "truncated-png", "error")
    put("trunc_png_noiend.png", png[:idat_end], "truncated-png-trailer", "either",
        note="pixel data complete, IEND missing")

    jpeg = _encode(photo, "JPEG", quality=90)
    for cut in _offsets(1, len(jpeg) - 2, 40):  # everything up to (not including) the EOI marker
        put(f"trunc_jpg_{cut:05d}.jpg", jpeg[:cut], "truncated-jpeg", "error")
    put("trunc_jpg_noeoi.jpg", jpeg[:-2], "truncated-jpeg-trailer", "either", note="EOI marker missing")

    try:
        webp = _encode(photo, "WEBP", quality=80)
    except (KeyError, OSError):  # Pillow built without WebP
        webp = b""
    if webp:
        for cut in _offsets(1, len(webp), 30):
            put(f"trunc_webp_{cut:05d}.webp", webp[:cut], "truncated-webp", "error")

    gif = _encode(Image.fromarray(_noise(40, 56, seed + 1)).convert("P"), "GIF")
    for cut in _offsets(1, len(gif) - 2, 30):  # keeps at least the end of the LZW data away
        put(f"trunc_gif_{cut:05d}.gif", gif[:cut], "truncated-gif", "either" if cut > len(gif) - 40 else "error",
            note="a GIF cut inside its last sub-blocks may still decode")
    tif = _encode(Image.fromarray(_noise(24, 30, seed + 2)), "TIFF")
    for cut in _offsets(1, len(tif), 10):
        put(f"trunc_tif_{cut:05d}.tif", tif[:cut], "truncated-tiff", "either",
            note="TIFF keeps its directory at the end or the start: some cuts only lose tags")
    bmp = _encode(Image.fromarray(_noise(24, 30, seed + 3)), "BMP")
    for cut in _offsets(1, len(bmp) - 2, 10):  # the last row's 2 padding bytes are optional
        put(f"trunc_bmp_{cut:05d}.bmp", bmp[:cut], "truncated-bmp", "error")

    # -- empty and random files ----------------------------------------------------------------
    for ext in ("png", "jpg", "jpeg", "gif", "webp", "tif", "bmp"):
        put(f"zero.{ext}", b"", "zero-byte", "error")
    rng = np.random.default_rng(seed + 10)
    for i, (ext, n) in enumerate([("png", 1), ("jpg", 7), ("gif", 64), ("webp", 512), ("tiff", 4096),
                                  ("bmp", 65536), ("PNG", 100_000), ("JPG", 3)]):
        put(f"random_{i}.{ext}", rng.integers(0, 256, n, dtype=np.uint8).tobytes(), "random-bytes", "error")
    for name, magic in [("magic_png.png", b"\x89PNG\r\n\x1a\n"), ("magic_jpg.jpg", b"\xff\xd8\xff\xe0"),
                        ("magic_gif.gif", b"GIF89a"), ("magic_webp.webp", b"RIFF\x00\x10\x00\x00WEBPVP8 "),
                        ("magic_tif.tif", b"II*\x00"), ("magic_bmp.bmp", b"BM")]:
        put(name, magic + rng.integers(0, 256, 2000, dtype=np.uint8).tobytes(), "magic-then-random", "error")

    # -- other content behind an image name ------------------------------------------------------
    put("notes.png", b"Just some text, not a picture.\n" * 20, "text", "error")
    put("unicode.jpg", "Ünïcødé ✓ — שלום\n".encode() * 10, "text", "error")
    put("drawing.png", b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
                       b'<rect width="10" height="10" fill="red"/></svg>', "svg", "error")
    put("drawing.svg.jpg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "svg", "error")
    put("page.gif", b"<!DOCTYPE html><html><body><img src=x onerror=alert(1)></body></html>", "html", "error")
    put("data.webp", json.dumps({"not": "an image"}).encode(), "json", "error")
    put("archive.png", b"PK\x03\x04" + bytes(200), "zip", "error")
    put("program.jpg", b"\x7fELF\x02\x01\x01" + bytes(300), "elf", "error")
    put("document.tif", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\n", "pdf", "error")

    # -- decompression bombs ------------------------------------------------------------------
    put("bomb_header_png.png", _png(100_000, 100_000, 8, 2, zlib.compress(b"\x00" * 301)), "bomb-header", "error",
        note="10^10 pixels declared over a few bytes of data")
    put("bomb_header_huge.png", _png(0x7FFFFFFF, 0x7FFFFFFF, 8, 6, zlib.compress(b"")), "bomb-header", "error")
    # 1-bit 20000x20000 (400 M pixels, past Pillow's own guard) in ~50 KB of real zlib data
    put("bomb_zlib_1bit.png", _png(20_000, 20_000, 1, 0, _zeros_compressed(2_500, 20_000)), "bomb-zlib", "error")
    # 8-bit grey 9000x9000 (81 M pixels: under Pillow's guard, over ours) in ~80 KB
    put("bomb_zlib_gray.png", _png(9_000, 9_000, 8, 0, _zeros_compressed(9_000, 9_000)), "bomb-zlib", "error")
    sof = bytearray(_encode(Image.new("RGB", (8, 8), (9, 9, 9)), "JPEG"))
    at = sof.find(b"\xff\xc0")
    sof[at + 5:at + 9] = struct.pack(">HH", 65_000, 65_000)
    put("bomb_header_jpg.jpg", bytes(sof), "bomb-header", "error")
    gif_bomb = bytearray(_encode(Image.new("P", (8, 8), 0), "GIF"))
    gif_bomb[6:10] = struct.pack("<HH", 65_535, 65_535)  # logical screen
    at = gif_bomb.find(b"\x2c")  # image descriptor
    gif_bomb[at + 5:at + 9] = struct.pack("<HH", 65_535, 65_535)
    put("bomb_header_gif.gif", bytes(gif_bomb), "bomb-header", "error")
    bmp_bomb = bytearray(_encode(Image.new("RGB", (8, 8)), "BMP"))
    bmp_bomb[18:26] = struct.pack("<ii", 40_000, 40_000)
    put("bomb_header_bmp.bmp", bytes(bmp_bomb), "bomb-header", "error")
    if webp:
        vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00" + (16_383).to_bytes(3, "little") * 2
        body = b"WEBP" + vp8x + webp[12:]
        put("bomb_header_webp.webp", b"RIFF" + struct.pack("<I", len(body)) + body, "bomb-header", "error")
    put("zero_size.png", _png(0, 8, 8, 2, zlib.compress(b"")), "zero-size", "error")
    # a zTXt metadata chunk that inflates to 64 MB (Pillow caps text chunks)
    text_bomb = _chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(b"A" * (64 << 20), 9))
    small = Image.new("RGB", (8, 8), (200, 10, 10))
    raw = b"".join(b"\x00" + bytes(small.tobytes()[y * 24:(y + 1) * 24]) for y in range(8))
    put("bomb_ztxt.png", _png(8, 8, 8, 2, zlib.compress(raw), extra=text_bomb), "bomb-metadata", "either")

    # -- corrupted in the middle (bit flips) -----------------------------------------------------
    for i, (fmt_name, data, ext) in enumerate([("png", png, "png"), ("jpeg", jpeg, "jpg"), ("gif", gif, "gif")]):
        for j, frac in enumerate((0.3, 0.6, 0.9)):
            bad = bytearray(data)
            pos = int(len(bad) * frac)
            bad[pos:pos + 4] = bytes(b ^ 0xFF for b in bad[pos:pos + 4])
            put(f"flip_{fmt_name}_{j}.{ext}", bytes(bad), "bit-flip", "either")

    # -- valid but unusual ---------------------------------------------------------------------
    def ok(name: str, img: Image.Image, fmt: str, kind: str, size=None, pixel=None, **kw) -> None:
        put(name, _encode(img, fmt, **kw), kind, "ok", size=size or img.size, pixel=pixel)

    ok("one_pixel.png", Image.new("RGB", (1, 1), (250, 5, 5)), "PNG", "tiny", pixel=((0, 0), (250, 5, 5)))
    ok("one_pixel.jpg", Image.new("RGB", (1, 1), (5, 5, 250)), "JPEG", "tiny")
    ok("one_pixel.gif", Image.new("P", (1, 1), 0), "GIF", "tiny")
    ok("wide_20000x20.png", Image.fromarray(_smooth(20, 20_000, seed)), "PNG", "extreme-aspect")
    ok("tall_20x20000.jpg", Image.fromarray(_smooth(20_000, 20, seed)), "JPEG", "extreme-aspect")
    ok("cmyk.jpg", Image.new("CMYK", (32, 24), (0, 255, 255, 0)), "JPEG", "cmyk", quality=95,
       pixel=((16, 12), (255, 0, 0)))
    ok("cmyk.tif", Image.new("CMYK", (32, 24), (255, 0, 255, 0)), "TIFF", "cmyk", pixel=((16, 12), (0, 255, 0)))
    ok("gray16.png", Image.fromarray(np.full((20, 30), 257 * 200, np.uint16)), "PNG", "16-bit",
       pixel=((3, 3), (200, 200, 200)))
    ok("gray16.tif", Image.fromarray(np.full((20, 30), 257 * 50, np.uint16)), "TIFF", "16-bit")
    rgb16 = np.zeros((6, 5, 3), dtype=">u2")
    rgb16[..., 2] = 65535
    put("rgb16.png", _png(5, 6, 16, 2, zlib.compress(b"".join(b"\x00" + rgb16[y].tobytes() for y in range(6)))),
        "16-bit", "ok", size=(5, 6), pixel=((2, 2), (0, 0, 255)))
    pal = Image.new("P", (20, 10), 1)
    pal.putpalette([0, 255, 0, 255, 0, 255] + [0] * 762)
    ok("palette.png", pal, "PNG", "palette", pixel=((5, 5), (255, 0, 255)))
    put("palette_transparent.png", _encode(pal, "PNG", transparency=1), "palette", "ok", size=(20, 10),
        pixel=((5, 5), (255, 255, 255)))
    ok("palette.bmp", pal, "BMP", "palette")
    ok("la.png", Image.new("LA", (12, 12), (0, 0)), "PNG", "alpha", pixel=((6, 6), (255, 255, 255)))
    ok("rgba.png", Image.new("RGBA", (12, 12), (0, 0, 255, 255)), "PNG", "alpha", pixel=((6, 6), (0, 0, 255)))
    ok("rgba_clear.png", Image.new("RGBA", (12, 12), (0, 0, 255, 0)), "PNG", "alpha", pixel=((6, 6), (255, 255, 255)))
    if webp:
        ok("rgba.webp", Image.new("RGBA", (12, 12), (255, 0, 0, 255)), "WEBP", "alpha", lossless=True,
           pixel=((6, 6), (255, 0, 0)))
    ok("bilevel.png", Image.new("1", (9, 9), 1), "PNG", "modes", pixel=((4, 4), (255, 255, 255)))
    ok("gray.jpg", Image.new("L", (9, 9), 77), "JPEG", "modes")
    ok("float.tif", Image.fromarray(np.full((6, 6), 0.5, np.float32)), "TIFF", "modes")
    # EXIF orientation 1..8 of a 40x20 image, left half red, right half blue
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)
    arr[:, 20:] = (0, 0, 255)
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        size = (20, 40) if orientation >= 5 else (40, 20)
        put(f"exif_orientation_{orientation}.jpg", _encode(Image.fromarray(arr), "JPEG", exif=exif, quality=95),
            "exif-rotated", "ok", size=size)
    put("exif_garbage.jpg", _exif_garbage(_encode(Image.fromarray(arr), "JPEG")), "exif-garbage", "either")
    frames = [Image.new("RGB", (10, 8), c) for c in [(255, 0, 0), (0, 0, 255), (0, 255, 0)]]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=40, loop=0)
    put("animated.gif", buf.getvalue(), "animated", "ok", size=(10, 8), pixel=((4, 4), (255, 0, 0)))
    if webp:
        buf = io.BytesIO()
        frames[2].save(buf, format="WEBP", save_all=True, append_images=frames[:2], duration=40, lossless=True)
        put("animated.webp", buf.getvalue(), "animated", "ok", size=(10, 8), pixel=((4, 4), (0, 255, 0)))
    buf = io.BytesIO()
    frames[1].save(buf, format="TIFF", save_all=True, append_images=[frames[0]])
    put("multipage.tif", buf.getvalue(), "animated", "ok", size=(10, 8), pixel=((4, 4), (0, 0, 255)))
    put("jpeg_named.png", _encode(Image.new("RGB", (7, 5), (0, 200, 0)), "JPEG"), "wrong-extension", "ok",
        size=(7, 5))
    put("png_named.jpg", _encode(Image.new("RGB", (5, 7), (0, 0, 200)), "PNG"), "wrong-extension", "ok",
        size=(5, 7), pixel=((2, 2), (0, 0, 200)))
    put("progressive.jpg", _encode(Image.fromarray(_smooth(30, 30, seed)), "JPEG", progressive=True),
        "progressive", "ok", size=(30, 30))
    put("upper.JPEG", _encode(Image.new("RGB", (6, 6), (1, 2, 3)), "JPEG"), "wrong-extension", "ok", size=(6, 6))
    put("name with spaces é ☕.png", _encode(Image.new("RGB", (6, 6), (9, 9, 9)), "PNG"), "odd-name", "ok",
        size=(6, 6))

    # -- entries that are not readable regular files ----------------------------------------------
    locked = dest / "locked.png"
    locked.write_bytes(_encode(Image.new("RGB", (6, 6), (40, 40, 40)), "PNG"))
    locked.chmod(0)
    readable = os.access(locked, os.R_OK)  # root reads anything
    items.append(Item("locked.png", "unreadable", "ok" if readable else "error", size=(6, 6) if readable else None,
                      note="chmod 000" + (" (readable anyway: running as root)" if readable else "")))
    folder = dest / "folder.png"
    folder.mkdir()
    (folder / "inside.txt").write_text("a directory named like an image")
    items.append(Item("folder.png", "dir-named-image", "error"))
    if hasattr(os, "mkfifo"):
        os.mkfifo(dest / "pipe.jpg")  # opening it for reading would block forever without a writer
        items.append(Item("pipe.jpg", "fifo", "error"))
    if hasattr(os, "symlink"):
        os.symlink(dest / "no-such-file.png", dest / "dangling.png")
        items.append(Item("dangling.png", "dangling-symlink", "error"))
        os.symlink("loop_b.png", dest / "loop_a.png")
        os.symlink("loop_a.png", dest / "loop_b.png")
        os.symlink("self.jpg", dest / "self.jpg")
        items += [Item("loop_a.png", "symlink-loop", "error"), Item("loop_b.png", "symlink-loop", "error"),
                  Item("self.jpg", "symlink-loop", "error")]
    return items


def _exif_garbage(jpeg: bytes) -> bytes:
    """Insert an APP1 'Exif' segment full of garbage right after SOI."""
    payload = b"Exif\x00\x00" + b"MM\x00\x2a\x00\x00\x00\x08\xff\xff" + bytes(range(256)) * 2
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def sample(items: list[Item], per_kind: int = 1) -> list[Item]:
    """`per_kind` items of every kind, spread over the kind (one: its middle item), in corpus order."""
    by_kind: dict[str, list[Item]] = {}
    for item in items:
        by_kind.setdefault(item.kind, []).append(item)
    picked = set()
    for group in by_kind.values():
        n = min(per_kind, len(group))
        picked.update(group[(2 * k + 1) * len(group) // (2 * n)].name for k in range(n))
    return [item for item in items if item.name in picked]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tests/malformed.py OUT_DIR", file=sys.stderr)
        return 2
    items = generate(argv[0])
    (Path(argv[0]) / "manifest.json").write_text(json.dumps([asdict(i) for i in items], indent=1) + "\n")
    kinds = sorted({i.kind for i in items})
    print(f"wrote {len(items)} files of {len(kinds)} kinds to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

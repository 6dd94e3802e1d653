"""Image loading and Moondream-2 overlap-crop preprocessing.

Everything here follows the format reference (docs: moondream2-format.md, sections 3-5) and is
parameterised by a :class:`~engine.model.config.VisionConfig`, so the same code serves the official
378 px / 14 px / 4-patch-margin geometry and the tiny test geometry.

Pipeline::

    image = load_image(path)                       # RGB PIL image, EXIF-rotated, fully decoded
    oc = overlap_crop_image(image, cfg)            # uint8 [1 + th*tw, crop, crop, 3], crop 0 = global
    x = normalize_crops(oc.crops)                  # float NCHW in [-1, 1]
    patches = patchify(x, cfg.patch_size)          # [N, grid*grid, 3*p*p] -> vision encoder
    ...encoder -> feats [N, grid*grid, D]
    local = feats[1:].view(-1, grid, grid, D)
    stitched = reconstruct_from_crops(local, oc.tiling, cfg.overlap_margin)
    pooled = pool_to_grid(stitched, cfg.grid)      # [grid*grid, D], concatenated after feats[0]
"""

from __future__ import annotations

import errno
import io
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Union

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps, UnidentifiedImageError

from .config import VisionConfig
from .resize import resize_plan, vips_resize

__all__ = [
    "ImageError",
    "MAX_PIXELS",
    "ImageSource",
    "load_image",
    "select_tiling",
    "tiling_for_size",
    "OverlapCrops",
    "overlap_crop_image",
    "normalize_crops",
    "patchify",
    "reconstruct_from_crops",
    "pool_to_grid",
]

#: Default decompression-bomb guard: images declaring more pixels than this are refused
#: before any pixel data is decoded.
MAX_PIXELS = 50_000_000

ImageSource = Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO, Image.Image, np.ndarray]


class ImageError(ValueError):
    """An image could not be read or used; the message names the source and the problem."""


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _fail(name: str, reason: str) -> ImageError:
    return ImageError(f"cannot read image {name!r}: {_one_line(reason)}")


def _check_size(name: str, width: int, height: int, max_pixels: int | None) -> None:
    if width <= 0 or height <= 0:
        raise _fail(name, f"image has zero size ({width}x{height})")
    if max_pixels is not None and width * height > max_pixels:
        raise _fail(
            name,
            f"image is too large: {width}x{height} = {width * height:,} pixels exceeds the limit of "
            f"{max_pixels:,} (possible decompression bomb)",
        )


def _scale_to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """Map a single-channel high-bit-depth array to 0..255."""
    a = arr.astype(np.float64)
    if mode.startswith("I;16"):
        a = a / 257.0
    elif mode == "F" and a.size and np.nanmin(a) >= 0.0 and np.nanmax(a) <= 1.0:
        a = a * 255.0
    elif a.size and np.nanmax(a) > 255.0:
        # 32-bit integer / float images almost always carry 16-bit data (e.g. 16-bit grayscale PNG/TIFF).
        a = a / 257.0
    a = np.nan_to_num(a, nan=0.0, posinf=255.0, neginf=0.0)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def _composite_on_white(rgba: Image.Image) -> Image.Image:
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def _to_rgb(img: Image.Image, name: str) -> Image.Image:
    """Convert any PIL mode to 8-bit RGB; alpha (and palette transparency) is composited on white.

    Always returns a new image object (never `img` itself).
    """
    mode = img.mode
    if mode == "RGB":
        return img.copy()
    palette_alpha = mode == "P" and img.palette is not None and "A" in getattr(img.palette, "mode", "")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or palette_alpha or (
        mode in ("P", "L", "RGB") and "transparency" in img.info
    ):
        return _composite_on_white(img.convert("RGBA"))
    if mode.startswith("I") or mode == "F":
        gray = _scale_to_uint8(np.asarray(img), mode)
        if gray.ndim != 2:
            raise _fail(name, f"unsupported colour mode {mode!r}")
        return Image.fromarray(np.repeat(gray[:, :, None], 3, axis=2), "RGB")
    try:
        return img.convert("RGB")
    except (ValueError, OSError) as exc:
        raise _fail(name, f"unsupported colour mode {mode!r} ({exc})") from exc


def _exif_transpose(img: Image.Image) -> Image.Image:
    try:
        out = ImageOps.exif_transpose(img)
    except Exception:  # malformed EXIF: orientation is metadata only, keep the pixels as stored
        return img
    return img if out is None else out


def _from_array(arr: np.ndarray, name: str, max_pixels: int | None) -> Image.Image:
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (3, 4)):
        raise _fail(name, f"expected an HxWx3 (or HxW / HxWx4) array, got shape {tuple(arr.shape)}")
    _check_size(name, int(arr.shape[1]), int(arr.shape[0]), max_pixels)
    if arr.dtype != np.uint8:
        raise _fail(name, f"expected a uint8 array, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr)
    if arr.ndim == 2:
        return Image.fromarray(np.repeat(arr[:, :, None], 3, axis=2), "RGB")
    if arr.shape[2] == 4:
        return _composite_on_white(Image.fromarray(arr, "RGBA"))
    return Image.fromarray(arr.copy(), "RGB")


def _decode(img: Image.Image, name: str, max_pixels: int | None) -> Image.Image:
    """Size check (header only), then full decode of frame 0, EXIF orientation and RGB conversion."""
    _check_size(name, img.width, img.height, max_pixels)
    try:
        if img.tell() != 0:  # multi-frame image positioned elsewhere: use the first frame
            img.seek(0)
        img.load()
        rotated = _exif_transpose(img)
        return _to_rgb(rotated, name)
    except ImageError:
        raise
    except Image.DecompressionBombError as exc:
        raise _fail(name, f"image is too large: {exc}") from exc
    except MemoryError as exc:
        raise _fail(name, "not enough memory to decode the image") from exc
    except Exception as exc:
        detail = str(exc) or type(exc).__name__
        raise _fail(name, f"truncated or corrupt image data ({detail})") from exc


def _open_and_decode(fp: Any, name: str, max_pixels: int | None) -> Image.Image:
    try:
        img = Image.open(fp)
    except UnidentifiedImageError as exc:
        raise _fail(name, "not a recognised image format") from exc
    except Image.DecompressionBombError as exc:
        raise _fail(name, f"image is too large: {exc}") from exc
    except Exception as exc:
        detail = str(exc) or type(exc).__name__
        raise _fail(name, f"truncated or corrupt image data ({detail})") from exc
    with img:
        return _decode(img, name, max_pixels)


def _open_regular_file(path: Path, name: str) -> BinaryIO:
    """Open `path` for reading only if it is a non-empty regular file; ImageError otherwise.

    The file is opened non-blocking and checked with fstat on the open descriptor, so a FIFO
    (which would block a plain open() forever), a device, a socket or a directory is refused
    without reading from it, even if it replaced a regular file a moment before.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        if os.path.islink(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            raise _fail(name, f"file not found (broken symbolic link to {target!r})") from exc
        raise _fail(name, "file not found") from exc
    except IsADirectoryError as exc:
        raise _fail(name, "is a directory, not an image file") from exc
    except PermissionError as exc:
        if os.path.isdir(path):
            raise _fail(name, "is a directory, not an image file") from exc
        raise _fail(name, "permission denied") from exc
    except (OSError, ValueError) as exc:  # ValueError: embedded NUL byte etc.
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            raise _fail(name, "too many levels of symbolic links (a symbolic link loop)") from exc
        raise _fail(name, exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) from exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _fail(name, "is a directory, not an image file")
        if not stat.S_ISREG(st.st_mode):
            what = ("a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a special file")
            raise _fail(name, f"is {what}, not a regular image file")
        if st.st_size == 0:
            raise _fail(name, "file is empty (0 bytes)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_image(source: ImageSource, *, max_pixels: int | None = MAX_PIXELS) -> Image.Image:
    """Load an image as a fully decoded RGB PIL image.

    `source` may be a path (str / PathLike), encoded bytes, a binary file-like object, a PIL
    image or a uint8 numpy array (HxWx3; HxW and HxWx4 are accepted too). EXIF orientation is
    applied, multi-frame files yield their first frame, every colour mode (palette, L/LA,
    RGBA, CMYK, 16-bit, 1-bit, ...) becomes 8-bit RGB with alpha composited on white.
    The declared size is checked against `max_pixels` (None: no limit of ours) before any pixel
    data is decoded. Every failure raises :class:`ImageError` with a one-line message.
    (Pillow's own guard, at 2 * ``PIL.Image.MAX_IMAGE_PIXELS``, still applies when `max_pixels`
    is larger or None; it is reported as an ImageError too.)
    """
    if max_pixels is not None and (isinstance(max_pixels, bool) or int(max_pixels) <= 0):
        raise ValueError(f"max_pixels must be a positive integer or None, got {max_pixels!r}")

    if isinstance(source, Image.Image):
        name = "<PIL image>"
        fname = getattr(source, "filename", "")
        if isinstance(fname, str) and fname:
            name = fname
        return _decode(source, name, max_pixels)

    if isinstance(source, np.ndarray):
        return _from_array(source, "<array>", max_pixels)

    if isinstance(source, (str, os.PathLike)):
        try:
            path = Path(os.fsdecode(source))
            name = str(path)
        except Exception as exc:  # e.g. undecodable bytes path
            raise _fail(repr(source), f"invalid path ({exc})") from exc
        fh = _open_regular_file(path, name)
        with fh:
            return _open_and_decode(fh, name, max_pixels)

    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        name = "<bytes>"
    elif hasattr(source, "read"):
        fname = getattr(source, "name", None)
        name = fname if isinstance(fname, str) else "<stream>"
        try:
            data = source.read()
        except Exception as exc:
            raise _fail(name, f"could not read from stream ({exc})") from exc
        if isinstance(data, str):
            raise _fail(name, "stream is in text mode; open it in binary mode ('rb')")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise _fail(name, f"stream returned {type(data).__name__}, not bytes")
        data = bytes(data)
    else:
        raise ImageError(f"cannot read image: unsupported source type {type(source).__name__!r}")

    if not data:
        raise _fail(name, "file is empty (0 bytes)")
    return _open_and_decode(io.BytesIO(data), name, max_pixels)


# --------------------------------------------------------------------------------------------
# Tiling (section 4.2)
# --------------------------------------------------------------------------------------------

def select_tiling(height: int, width: int, window: int, max_crops: int) -> tuple[int, int]:
    """Tile grid (rows, cols) for a margin-reduced image size (section 4.2).

    `height` / `width` are the image size minus both margins (may be <= 0 for small images),
    `window` the usable tile window in pixels (266 for the official geometry).

    Deviation from the literal reference: in step 3 the reference clamps a side that floors to 0
    up to 1, which for extreme aspect ratios (one side more than ~12x the other, both beyond a
    window) yields more than `max_crops` tiles. Here that result is capped so that
    rows * cols <= max_crops always holds. Whenever the literal algorithm stays within
    `max_crops` (every ordinary image), the result is identical.
    """
    if window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    if max_crops < 1:
        raise ValueError(f"max_crops must be >= 1, got {max_crops}")
    if height <= window or width <= window:
        return (1, 1)
    min_h = math.ceil(height / window)
    min_w = math.ceil(width / window)
    if min_h * min_w > max_crops:
        ratio = math.sqrt(max_crops / (min_h * min_w))
        th = max(1, math.floor(min_h * ratio))
        tw = max(1, math.floor(min_w * ratio))
        # Cap (see docstring): only reached when one side was clamped up to 1.
        if th * tw > max_crops:
            if th >= tw:
                th = max(1, max_crops // tw)
            else:
                tw = max(1, max_crops // th)
        return (th, tw)
    th = max(math.floor(math.sqrt(max_crops * height / width)), min_h)
    tw = max(math.floor(math.sqrt(max_crops * width / height)), min_w)
    if th * tw > max_crops:
        if tw > th:
            tw = math.floor(max_crops / th)
        else:
            th = math.floor(max_crops / tw)
    return (max(1, th), max(1, tw))


def _geometry(cfg: VisionConfig) -> tuple[int, int, int]:
    """(crop_px, window_px, margin_px)."""
    crop = cfg.crop_size
    grid = cfg.grid
    if crop % cfg.patch_size:
        raise ValueError(f"crop_size {crop} is not a multiple of patch_size {cfg.patch_size}")
    if not 0 <= 2 * cfg.overlap_margin < grid:
        raise ValueError(f"overlap_margin {cfg.overlap_margin} leaves no tile interior in a {grid}-patch grid")
    margin_px = cfg.overlap_margin * cfg.patch_size
    window = (grid - 2 * cfg.overlap_margin) * cfg.patch_size
    return crop, window, margin_px


def tiling_for_size(height: int, width: int, cfg: VisionConfig) -> tuple[int, int]:
    """Tiling that :func:`overlap_crop_image` uses for an image of `height` x `width` pixels."""
    _, window, margin_px = _geometry(cfg)
    return select_tiling(height - 2 * margin_px, width - 2 * margin_px, window, cfg.max_crops)


# --------------------------------------------------------------------------------------------
# Cropping (section 4.3)
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# Resizing (section 4.3): libvips Lanczos3, as the reference implementation; Pillow without it
# --------------------------------------------------------------------------------------------

try:
    import pyvips
except (ImportError, OSError):  # no pyvips, or pyvips without its libvips
    pyvips = None

#: Which resampler `overlap_crop_image` uses: "pyvips" (the reference's) or "pillow" (its fallback);
#: "torch" (libvips' arithmetic in torch, the same pixels as "pyvips") is chosen explicitly.
RESIZER = "pyvips" if pyvips is not None else "pillow"


def resize_rgb(pixels: np.ndarray, height: int, width: int, resizer: str | None = None) -> np.ndarray:
    """uint8 [H, W, 3] → uint8 [height, width, 3], aspect ratio ignored, Lanczos3.

    With pyvips (libvips releases the GIL and runs multi-threaded) the image is scaled by the
    factors width/W and height/H, as the reference does; libvips may round the result to one
    pixel less or more, so it is placed on a zero canvas of the exact size (the reference keeps
    those missing pixels zero too). "torch" computes libvips' arithmetic with torch
    (`engine.model.resize.vips_resize`): the same pixels, on any device. Pillow's LANCZOS is the
    reference's own fallback.
    """
    resizer = resizer or RESIZER
    if resizer == "torch":  # libvips' arithmetic as torch matrices (engine.model.resize): the same pixels
        return resize_tensor(torch.from_numpy(np.require(pixels, requirements=["C", "W"])), height, width).numpy()
    if resizer == "pyvips":
        if pyvips is None:
            raise ValueError("pyvips is not installed; pip install pyvips pyvips-binary, or use resizer='pillow'")
        src = pyvips.Image.new_from_array(np.ascontiguousarray(pixels))
        out = src.resize(width / pixels.shape[1], vscale=height / pixels.shape[0], kernel="lanczos3").numpy()
        return _on_canvas(out, height, width, lambda: np.zeros((height, width, 3), dtype=np.uint8))
    if resizer == "pillow":
        return np.asarray(Image.fromarray(pixels).resize((width, height), Image.Resampling.LANCZOS))
    raise ValueError(f"unknown resizer {resizer!r}; choose pyvips, torch or pillow")


@dataclass(frozen=True)
class OverlapCrops:
    """uint8 crops [1 + th*tw, crop, crop, 3] (index 0 = global, then tiles row-major) and (th, tw);
    a numpy array (`overlap_crop_image`) or a tensor on a device (`overlap_crops_tensor`)."""

    crops: np.ndarray | torch.Tensor
    tiling: tuple[int, int]

    @property
    def n_crops(self) -> int:
        return int(self.crops.shape[0])


def _as_rgb_pil(image: Image.Image | np.ndarray) -> Image.Image:
    if isinstance(image, Image.Image):
        _check_size("<PIL image>", image.width, image.height, None)
        return image if image.mode == "RGB" else _to_rgb(image, "<PIL image>")
    if isinstance(image, np.ndarray):
        return _from_array(image, "<array>", None)
    raise TypeError(f"expected a PIL image or a uint8 numpy array, got {type(image).__name__}")


def overlap_crop_image(
    image: Image.Image | np.ndarray,
    cfg: VisionConfig,
    *,
    tiling: tuple[int, int] | None = None,
    resizer: str | None = None,
) -> OverlapCrops:
    """Global crop plus overlapping local tiles (section 4.3).

    The global crop is the whole image resized to crop x crop (aspect ratio ignored, Lanczos3:
    `resize_rgb`, libvips when installed, as the reference; `resizer` forces one).
    The local tiles come from the whole image resized to
    (th*window + 2*margin_px) x (tw*window + 2*margin_px); tile (i, j) is the crop x crop window
    at (i*window, j*window). `tiling` overrides :func:`select_tiling` (tests / experiments).
    """
    pixels = np.asarray(_as_rgb_pil(image))                        # [H, W, 3] uint8
    crops, tiling = _crops(pixels, cfg, tiling, lambda h, w: resize_rgb(pixels, h, w, resizer), np.stack)
    return OverlapCrops(crops=crops, tiling=tiling)


def overlap_crops_tensor(pixels: torch.Tensor, cfg: VisionConfig, *,
                         tiling: tuple[int, int] | None = None) -> tuple[torch.Tensor, tuple[int, int]]:
    """`overlap_crop_image` of uint8 RGB pixels [H, W, 3] already on a device (a GPU, say), by
    libvips' arithmetic in torch (`engine.model.resize`): the same crops as libvips', as uint8
    [1 + th*tw, crop, crop, 3] on that device, and the tiling (th, tw)."""
    return _crops(pixels, cfg, tiling, lambda h, w: resize_tensor(pixels, h, w), torch.stack)


def prepare_overlap_crops(height: int, width: int, cfg: VisionConfig) -> tuple[int, int]:
    """Build (and cache) on the CPU the resize plans `overlap_crops_tensor` needs for a height × width
    image, so that a device's thread only multiplies; returns the tiling."""
    tiling = tiling_for_size(height, width, cfg)
    resize_plan(height, width, *_canvas_size(cfg, tiling))
    resize_plan(height, width, cfg.crop_size, cfg.crop_size)
    return tiling


def _canvas_size(cfg: VisionConfig, tiling: tuple[int, int]) -> tuple[int, int]:
    """The size the whole image is resized to before its tiles are cut: (th·window + 2·margin, tw·…)."""
    _, window, margin_px = _geometry(cfg)
    return tiling[0] * window + 2 * margin_px, tiling[1] * window + 2 * margin_px


def _crops(pixels, cfg: VisionConfig, tiling, resize, stack):
    """The global crop and the tiles of `pixels` [H, W, 3]; `resize(h, w)` resizes them, `stack` joins crops."""
    crop, window, margin_px = _geometry(cfg)
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    if tiling is None:
        tiling = select_tiling(height - 2 * margin_px, width - 2 * margin_px, window, cfg.max_crops)
    th, tw = int(tiling[0]), int(tiling[1])
    if th < 1 or tw < 1:
        raise ValueError(f"tiling must be at least (1, 1), got {tiling}")
    canvas = resize(*_canvas_size(cfg, (th, tw)))                              # [canvas_h, canvas_w, 3]
    tiles = [canvas[i * window:i * window + crop, j * window:j * window + crop] for i in range(th) for j in range(tw)]
    return stack([resize(crop, crop)] + tiles), (th, tw)                       # [1 + th*tw, crop, crop, 3]


def resize_tensor(pixels: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """`resize_rgb(..., "pyvips")` of a uint8 [H, W, 3] tensor on its own device (libvips' arithmetic
    in torch): a pixel libvips rounds away stays zero, an extra one is dropped, as there."""
    out = vips_resize(pixels, height, width)
    return _on_canvas(out, height, width, lambda: torch.zeros((height, width, 3), dtype=torch.uint8, device=pixels.device))


def _on_canvas(out, height: int, width: int, zeros):
    """libvips' result `out` at exactly height × width: as it is when it fits, else on `zeros()`
    (a blank canvas): a pixel libvips rounds away stays zero, an extra one is dropped."""
    if tuple(out.shape[:2]) == (height, width):
        return out
    canvas = zeros()
    h, w = min(height, out.shape[0]), min(width, out.shape[1])
    canvas[:h, :w] = out[:h, :w]
    return canvas


# --------------------------------------------------------------------------------------------
# Tensors (sections 3, 4.1, 4.5)
# --------------------------------------------------------------------------------------------

def normalize_crops(
    crops: np.ndarray | torch.Tensor,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> [N, 3, H, W] in `dtype`, computed as (x / 255 - 0.5) / 0.5.

    The arithmetic runs in `dtype` after the cast, as in the reference (so bfloat16 rounds
    the same way).
    """
    t = torch.from_numpy(np.ascontiguousarray(crops)) if isinstance(crops, np.ndarray) else crops
    if t.dim() != 4 or t.shape[-1] != 3:
        raise ValueError(f"expected crops of shape [N, H, W, 3], got {tuple(t.shape)}")
    if t.dtype != torch.uint8:
        raise ValueError(f"expected uint8 crops, got {t.dtype}")
    if device is not None:
        t = t.to(device)
    x = t.permute(0, 3, 1, 2).to(dtype)
    return ((x / 255) - 0.5) / 0.5


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, C, H, W] -> [B, (H/p)*(W/p), C*p*p]; patches row-major, (channel, row, col) inside.

    Equivalent to a stride-p convolution whose kernel is flattened as [D, C, p, p].
    """
    if x.dim() != 4:
        raise ValueError(f"expected [B, C, H, W], got shape {tuple(x.shape)}")
    b, c, h, w = x.shape
    if h % patch or w % patch:
        raise ValueError(f"image size {h}x{w} is not a multiple of patch size {patch}")
    gh, gw = h // patch, w // patch
    x = x.reshape(b, c, gh, patch, gw, patch)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, gh * gw, c * patch * patch)


def reconstruct_from_crops(local: torch.Tensor, tiling: tuple[int, int], margin: int) -> torch.Tensor:
    """Stitch tile features [..., th*tw, g, g, C] into one grid [..., th*s + 2m, tw*s + 2m, C], s = g - 2m.

    Tile (ty, tx) has its origin at (ty*s, tx*s) and writes its interior, plus its outer
    `margin` cells on every side that touches the image border (section 4.5). This is the
    exact inverse of cutting overlapping g x g windows at stride s. Leading dims are a batch
    of images with the same tiling (training stitches many at once).
    """
    th, tw = int(tiling[0]), int(tiling[1])
    if local.dim() < 4 or local.shape[-3] != local.shape[-2]:
        raise ValueError(f"expected tile features [..., n, g, g, C], got shape {tuple(local.shape)}")
    *batch, n, g, _, c = local.shape
    if n != th * tw:
        raise ValueError(f"tiling {th}x{tw} needs {th * tw} tiles, got {n}")
    s = g - 2 * margin
    if margin < 0 or s <= 0:
        raise ValueError(f"margin {margin} leaves no interior in a {g}-cell tile")
    out = local.new_empty((*batch, th * s + 2 * margin, tw * s + 2 * margin, c))
    for ty in range(th):
        r0 = 0 if ty == 0 else margin
        r1 = g if ty == th - 1 else g - margin
        for tx in range(tw):
            c0 = 0 if tx == 0 else margin
            c1 = g if tx == tw - 1 else g - margin
            oy, ox = ty * s, tx * s
            out[..., oy + r0:oy + r1, ox + c0:ox + c1, :] = local[..., ty * tw + tx, r0:r1, c0:c1, :]
    return out


def pool_to_grid(stitched: torch.Tensor, grid: int) -> torch.Tensor:
    """[(B,) Hg, Wg, C] -> adaptive average pool to grid x grid -> [(B,) grid*grid, C] (row-major)."""
    if stitched.dim() not in (3, 4):
        raise ValueError(f"expected [Hg, Wg, C] or [B, Hg, Wg, C], got shape {tuple(stitched.shape)}")
    batched = stitched if stitched.dim() == 4 else stitched[None]
    b, c = batched.shape[0], batched.shape[-1]
    pooled = F.adaptive_avg_pool2d(batched.permute(0, 3, 1, 2), (grid, grid))  # [B, C, grid, grid]
    out = pooled.permute(0, 2, 3, 1).reshape(b, grid * grid, c)
    return out if stitched.dim() == 4 else out[0]

"""Draw point/detect results on an image with PIL.

Every mark is drawn as a coloured stroke between two contrasting strokes (dark outside,
white inside the dark), so it stays visible on light, dark and busy images alike:

    dark | white | colour | white | dark

Labels are filled tags in the mark's colour with black or white text (whichever contrasts
more) and a dark border. Sizes scale with the image, so marks look alike on a 200 px
thumbnail and on a 4000 px photo.
"""

from __future__ import annotations

from PIL import Image, ImageDraw, ImageFont

__all__ = ["PALETTE", "draw_result", "to_pixels"]

#: Saturated, mutually distinct colours; objects cycle through them.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (255, 59, 48),    # red
    (52, 199, 89),    # green
    (0, 122, 255),    # blue
    (255, 149, 0),    # orange
    (175, 82, 222),   # purple
    (0, 199, 190),    # teal
    (255, 214, 10),   # yellow
    (255, 45, 85),    # pink
    (90, 200, 250),   # sky
    (162, 132, 94),   # brown
)
DARK = (20, 20, 20)
WHITE = (255, 255, 255)
MAX_LABEL_CHARS = 28


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow built without FreeType: fixed-size bitmap font
        return ImageFont.load_default()


def _text_colour(fill: tuple[int, int, int]) -> tuple[int, int, int]:
    r, g, b = fill
    return DARK if 0.299 * r + 0.587 * g + 0.114 * b > 150 else WHITE


Box = tuple[float, float, float, float]


def to_pixels(result: dict, width: int, height: int) -> tuple[list[Box], list[tuple[float, float]]]:
    """Boxes ``(x0, y0, x1, y1)`` and points ``(x, y)`` of a result, in pixels."""
    boxes = [(o["x_min"] * width, o["y_min"] * height, o["x_max"] * width, o["y_max"] * height)
             for o in result.get("objects", [])]
    points = [(p["x"] * width, p["y"] * height) for p in result.get("points", [])]
    return boxes, points


def _tag_size(draw: ImageDraw.ImageDraw, font, text: str, pad: int) -> tuple[int, int, int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return right - left + 2 * pad, bottom - top + 2 * pad, left, top


def _tag(draw: ImageDraw.ImageDraw, font, text: str, xy: tuple[float, float], fill, size: tuple[int, int],
         pad: int) -> None:
    """A filled tag with its top-left corner at `xy`, moved inside the image if needed."""
    tw, th, left, top = _tag_size(draw, font, text, pad)
    x = min(max(0.0, xy[0]), max(0.0, size[0] - tw))
    y = min(max(0.0, xy[1]), max(0.0, size[1] - th))
    draw.rectangle((x, y, x + tw, y + th), fill=fill, outline=DARK, width=1)
    draw.text((x + pad - left, y + pad - top), text, font=font, fill=_text_colour(fill))


def _tag_text(label: str, score: float | None) -> str:
    """The object text (shortened) and its score, e.g. "red circle 0.93"."""
    text = " ".join(str(label).split())
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "\u2026"
    return text if score is None else f"{text} {score:.2f}".strip()


def draw_result(image: Image.Image, result: dict, label: str = "") -> Image.Image:
    """Return a copy of `image` (RGB) with the result's boxes or points drawn and numbered.

    `result` is an engine result, ``{"objects": [...]}`` (normalised boxes) or
    ``{"points": [...]}`` (normalised points); each tag shows the number, the object's own
    ``label`` (several-class results) or else `label`, and its ``score`` when it has one.
    """
    out = image.convert("RGB") if image.mode != "RGB" else image.copy()
    w, h = out.size
    short = max(1, min(w, h))
    core = max(3, round(short / 150))               # width of the coloured stroke
    ring = max(1, round(core / 3))                  # width of each contrasting ring
    font = _font(max(13, round(short / 36)))
    pad = max(2, ring + 1)
    items = result.get("objects", result.get("points", []))
    texts = [_tag_text(o.get("label", label), o.get("score")) for o in items]
    draw = ImageDraw.Draw(out)
    boxes, points = to_pixels(result, w, h)
    colours = [PALETTE[i % len(PALETTE)] for i in range(max(len(boxes), len(points)))]

    for (x0, y0, x1, y1), colour in zip(boxes, colours):
        # PIL strokes a rectangle inwards from its bounds: grow each bound by half the width
        # so that the three strokes are centred on the box edge.
        for width, c in ((core + 4 * ring, DARK), (core + 2 * ring, WHITE), (core, colour)):
            e = width / 2
            draw.rectangle((x0 - e, y0 - e, x1 + e, y1 + e), outline=c, width=width)
    radius = max(5, round(short / 60))
    for (x, y), colour in zip(points, colours):
        for r, c in ((radius + 2 * ring, DARK), (radius + ring, WHITE), (radius, colour)):
            draw.ellipse((x - r, y - r, x + r, y + r), fill=c)
        draw.ellipse((x - ring, y - ring, x + ring, y + ring), fill=DARK)

    # Labels last, so that no mark covers them.
    outer = core / 2 + 2 * ring
    for i, ((x0, y0, _, _), colour) in enumerate(zip(boxes, colours)):
        tag = f"{i + 1} {texts[i]}".strip()
        tw, th, _, _ = _tag_size(draw, font, tag, pad)
        y = y0 - outer - th if y0 - outer - th >= 0 else y0 + outer  # above the box, else just inside it
        _tag(draw, font, tag, (x0 - outer, y), colour, (w, h), pad)
    for i, ((x, y), colour) in enumerate(zip(points, colours)):
        tag = f"{i + 1} {texts[i]}".strip() if len(points) <= 12 else str(i + 1)
        tw, th, _, _ = _tag_size(draw, font, tag, pad)
        r = radius + 2 * ring + 1
        tx = x + r if x + r + tw <= w else x - r - tw                # right of the point, else left
        ty = y - r - th if y - r - th >= 0 else y + r                  # above, else below
        _tag(draw, font, tag, (tx, ty), colour, (w, h), pad)
    return out

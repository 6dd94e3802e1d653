"""app.draw: marks visible on light and dark images; app.coco: pixel boxes / keypoints."""

from __future__ import annotations

import json
from itertools import groupby

import numpy as np
import pytest
from PIL import Image
from pycocotools.coco import COCO

from app.coco import to_coco, write_coco
from app.draw import DARK, PALETTE, WHITE, draw_result

BOX = {"objects": [{"x_min": 0.25, "y_min": 0.25, "x_max": 0.75, "y_max": 0.75}]}
POINT = {"points": [{"x": 0.5, "y": 0.5}]}


def colours_across(img: Image.Image, y: int, x0: int, x1: int) -> list[tuple]:
    arr = np.asarray(img)
    return [tuple(int(v) for v in arr[y, x]) for x in range(x0, x1)]


@pytest.mark.parametrize("background", [(255, 255, 255), (0, 0, 0), (128, 128, 128), PALETTE[0]])
def test_box_has_colour_between_dark_and_white_strokes(background):
    img = Image.new("RGB", (400, 400), background)
    out = draw_result(img, BOX, "red circle")
    assert img.getpixel((100, 200)) == background  # input untouched
    for across in (colours_across(out, 200, 80, 121),  # a cut through the left edge (x = 100)
                   [tuple(int(v) for v in np.asarray(out)[y, 200]) for y in range(280, 321)]):  # bottom edge
        runs = [colour for colour, _ in groupby(across)]
        assert runs[0] == runs[-1] == background
        assert runs[1:-1] == [DARK, WHITE, PALETTE[0], WHITE, DARK]  # colour between white, between dark
    assert across[-1] == background  # inside the box the image is untouched


def test_labels_and_numbers():
    img = Image.new("RGB", (300, 200), (255, 255, 255))
    boxes = {"objects": [{"x_min": 0.1, "y_min": 0.3, "x_max": 0.4, "y_max": 0.9},
                         {"x_min": 0.6, "y_min": 0.3, "x_max": 0.9, "y_max": 0.9}]}
    out = draw_result(img, boxes, "a very long object name that will be cut short")
    above = np.asarray(out)[: int(0.3 * 200) - 4]  # the tags sit above the top edges
    for i, (x0, x1) in enumerate(((0, 150), (150, 300))):
        tag = above[:, x0:x1]
        assert (tag == PALETTE[i]).all(axis=-1).sum() > 200  # a filled tag in the mark's colour
        ys, xs = np.nonzero((tag == PALETTE[i]).all(axis=-1))
        inside = tag[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        assert (inside == WHITE).all(axis=-1).sum() > 30  # white text on the (dark enough) tag


def test_points_marked_where_they_are():
    for background in ((255, 255, 255), (0, 0, 0)):
        img = Image.new("RGB", (200, 100), background)
        out = draw_result(img, POINT, "dog")
        assert out.getpixel((100, 50)) == DARK  # centre dot
        ring = colours_across(out, 50, 100, 125)
        assert PALETTE[0] in ring and WHITE in ring and DARK in ring


@pytest.mark.parametrize("result", [{"objects": []}, {"points": []}])
def test_empty_result_changes_nothing(result):
    img = Image.new("RGB", (50, 40), (1, 2, 3))
    assert draw_result(img, result, "x").tobytes() == img.tobytes()


@pytest.mark.parametrize("size", [(1, 1), (8, 5), (3000, 20)])
def test_degenerate_sizes_and_modes(size):
    edge = {"objects": [{"x_min": 0.0, "y_min": 0.0, "x_max": 1.0, "y_max": 1.0},
                        {"x_min": 1.0, "y_min": 1.0, "x_max": 1.0, "y_max": 1.0}]}
    for mode in ("RGB", "RGBA", "L"):
        out = draw_result(Image.new(mode, size), edge, "x")
        assert out.mode == "RGB" and out.size == size
        draw_result(Image.new(mode, size), {"points": [{"x": 0.0, "y": 1.0}, {"x": 1.0, "y": 0.0}]}, "")


def records():
    return [
        {"path": "b.png", "width": 200, "height": 100, "task": "detect", "object": "cat",
         "result": {"objects": [{"x_min": 0.1, "y_min": 0.2, "x_max": 0.6, "y_max": 0.9}]}},
        {"path": "a.png", "width": 10, "height": 10, "task": "detect", "object": "cat", "result": {"objects": []}},
        {"path": "bad.png", "width": None, "height": None, "task": "detect", "object": "cat", "error": "x"},
    ]


def test_coco_detect_in_pixels(tmp_path):
    data = to_coco(records(), task="detect", classes=("cat",))
    assert [(i["id"], i["file_name"]) for i in data["images"]] == [(1, "a.png"), (2, "b.png")]
    (ann,) = data["annotations"]
    assert ann["image_id"] == 2 and ann["bbox"] == [20.0, 20.0, 100.0, 70.0] and ann["area"] == 7000.0
    assert ann["category_id"] == 1 and ann["iscrowd"] == 0 and ann["score"] == 1.0
    path = tmp_path / "coco.json"
    write_coco(path, data)
    assert [p.name for p in tmp_path.iterdir()] == ["coco.json"]  # no temp file left
    coco = COCO(str(path))
    assert coco.loadCats(1)[0]["name"] == "cat" and len(coco.getAnnIds(imgIds=[2])) == 1
    assert json.loads(path.read_text()) == data


def test_coco_points_as_keypoints():
    recs = [{"path": "p.png", "width": 200, "height": 100, "result": {"points": [{"x": 0.5, "y": 0.25}]}}]
    data = to_coco(recs, task="point", classes=("eye",))
    assert data["categories"][0]["keypoints"] == ["point"]
    (ann,) = data["annotations"]
    assert ann["keypoints"] == [100.0, 25.0, 2] and ann["num_keypoints"] == 1
    assert ann["bbox"] == [99.5, 24.5, 1.0, 1.0] and ann["area"] == 1.0

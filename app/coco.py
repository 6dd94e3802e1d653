"""COCO JSON from batch records (the JSONL lines written by app.batch).

One category, the queried object (id 1). Images that failed are left out of ``images``.
Coordinates are pixels; every annotation carries ``score: 1.0`` (the model gives no
confidence), so the same list can serve as ground truth (``COCO(path)``) or as detections
(``coco.loadRes(annotations)``).

* detect: ``bbox = [x, y, w, h]`` (top-left corner, width, height), ``area = w * h``.
* point: a keypoint annotation with one keypoint named ``"point"``:
  ``keypoints = [x, y, 2]`` (2 = labelled and visible), ``num_keypoints = 1``, plus a 1x1 pixel
  ``bbox`` centred on the point (``area = 1``) so that tools that expect a box accept it.
  Evaluate with ``COCOeval(gt, dt, "keypoints")`` after setting
  ``params.kpt_oks_sigmas = numpy.array([sigma])`` (one sigma, for the one keypoint;
  pycocotools' default has the 17 of COCO people).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = ["to_coco", "write_coco"]


def _r(v: float) -> float:
    return round(float(v), 2)


def to_coco(records: Iterable[dict], *, task: str, obj: str) -> dict:
    """A COCO dataset dict from successful records (sorted by path for stable image ids)."""
    category = {"id": 1, "name": obj, "supercategory": "object"}
    if task == "point":
        category.update(keypoints=["point"], skeleton=[])
    images, annotations = [], []
    ok = sorted((r for r in records if "error" not in r and "result" in r), key=lambda r: r["path"])
    for image_id, rec in enumerate(ok, start=1):
        w, h = rec["width"], rec["height"]
        images.append({"id": image_id, "file_name": rec["path"], "width": w, "height": h})
        result = rec["result"]
        if task == "detect":
            for o in result.get("objects", []):
                x0, y0 = o["x_min"] * w, o["y_min"] * h
                bw, bh = _r((o["x_max"] - o["x_min"]) * w), _r((o["y_max"] - o["y_min"]) * h)
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": 1,
                                    "bbox": [_r(x0), _r(y0), bw, bh], "area": _r(bw * bh),
                                    "iscrowd": 0, "score": 1.0})
        else:
            for p in result.get("points", []):
                x, y = p["x"] * w, p["y"] * h
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": 1,
                                    "keypoints": [_r(x), _r(y), 2], "num_keypoints": 1,
                                    "bbox": [_r(x - 0.5), _r(y - 0.5), 1.0, 1.0], "area": 1.0,
                                    "iscrowd": 0, "score": 1.0})
    return {
        "info": {"description": f"{task} {obj!r} by mdpipe (app.batch)", "version": "1.0"},
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": [category],
    }


def write_coco(path: Path, data: dict) -> None:
    """Write atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

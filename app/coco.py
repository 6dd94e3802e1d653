"""COCO JSON from batch records (the JSONL lines written by app.batch).

One category per queried object (ids 1, 2, … in ``--object`` order; an object of a
several-class record names its class in ``label``). Images that failed are left out of
``images``. Coordinates are pixels; every annotation carries the engine's ``score`` (the
object's confidence; 1.0 for records written before scores existed), so the same list can
serve as ground truth (``COCO(path)``) or as ranked detections (``coco.loadRes(annotations)``).

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

from app.common import follow_umask

__all__ = ["to_coco", "write_coco"]


def _r(v: float) -> float:
    return round(float(v), 2)


def _r4(v: float) -> float:
    return round(float(v), 4)


def to_coco(records: Iterable[dict], *, task: str, classes: tuple[str, ...]) -> dict:
    """A COCO dataset dict from successful records (sorted by path for stable image ids)."""
    categories = []
    for n, name in enumerate(classes, start=1):
        categories.append({"id": n, "name": name, "supercategory": "object"})
        if task == "point":
            categories[-1].update(keypoints=["point"], skeleton=[])
    images, annotations = [], []
    ok = sorted((r for r in records if "error" not in r and "result" in r), key=lambda r: r["path"])
    for image_id, rec in enumerate(ok, start=1):
        w, h = rec["width"], rec["height"]
        images.append({"id": image_id, "file_name": rec["path"], "width": w, "height": h})
        result = rec["result"]
        for o in result.get("objects", result.get("points", [])):
            common = {"id": len(annotations) + 1, "image_id": image_id,
                      "category_id": classes.index(o.get("label", classes[0])) + 1}
            score = _r4(o.get("score", 1.0))
            if task == "detect":
                x0, y0 = o["x_min"] * w, o["y_min"] * h
                bw, bh = _r((o["x_max"] - o["x_min"]) * w), _r((o["y_max"] - o["y_min"]) * h)
                annotations.append({**common, "bbox": [_r(x0), _r(y0), bw, bh], "area": _r(bw * bh),
                                    "iscrowd": 0, "score": score})
            else:
                x, y = o["x"] * w, o["y"] * h
                annotations.append({**common, "keypoints": [_r(x), _r(y), 2], "num_keypoints": 1,
                                    "bbox": [_r(x - 0.5), _r(y - 0.5), 1.0, 1.0], "area": 1.0,
                                    "iscrowd": 0, "score": score})
    return {
        "info": {"description": f"{task} {', '.join(repr(c) for c in classes)} by mdpipe (app.batch)",
                 "version": "1.0"},
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": categories,
    }


def write_coco(path: Path, data: dict) -> None:
    """Write atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        follow_umask(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

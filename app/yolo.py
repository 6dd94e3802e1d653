"""YOLO export from batch records (``python -m app.batch ... --format coco,yolo``).

Written under OUT, in the layout Ultralytics-style trainers read (`data.yaml` → `path`,
`train`/`val` image folders; each image's labels at the same relative path under ``labels/``):

* ``OUT/images/<path>``: a symbolic link to the source image (no copy);
* ``OUT/labels/<path without suffix>.txt``: one line per box, ``class cx cy w h`` (class index
  in ``--object`` order; centre and size normalised to [0, 1]); an empty file for an image
  with no object (a background image);
* ``OUT/data.yaml``: ``path`` (OUT), ``train`` and ``val`` (``images``), ``nc`` and ``names``.

Only boxes are exported: ``--task point`` with ``yolo`` is refused up front (a point has no
extent to train a box on). Images that failed get no label file. Every file is rewritten from
the records at the end of each run (resume keeps them complete).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from app.common import follow_umask

LABELS_NAME, IMAGES_NAME, DATA_NAME = "labels", "images", "data.yaml"

__all__ = ["label_lines", "read_labels", "write_yolo"]


def label_lines(result: dict, classes: tuple[str, ...]) -> list[str]:
    """`class cx cy w h` lines of a detect result (normalised boxes, label per object when several)."""
    lines = []
    for o in result.get("objects", []):
        cls = classes.index(o.get("label", classes[0]))
        w, h = o["x_max"] - o["x_min"], o["y_max"] - o["y_min"]
        lines.append(f"{cls} {o['x_min'] + w / 2:.6f} {o['y_min'] + h / 2:.6f} {w:.6f} {h:.6f}")
    return lines


def read_labels(path: Path) -> list[tuple[int, float, float, float, float]]:
    """(class, cx, cy, w, h) rows of a label file, as a trainer reads them."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        cls, *values = line.split()
        rows.append((int(cls), *map(float, values)))
    return rows


def _write_text(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".yolo-", suffix=".tmp", dir=target.parent)
    try:
        follow_umask(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _link(source: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.is_symlink() and os.readlink(link) == str(source):
            return
        link.unlink()
    os.symlink(source, link)


def write_yolo(out: Path, root: Path, records: list[dict], classes: tuple[str, ...]) -> list[Path]:
    """Write labels/, images/ and data.yaml under `out` for the records with a result."""
    import yaml

    out = Path(out)
    for rec in records:
        if "result" not in rec:
            continue
        rel = Path(rec["path"])
        lines = label_lines(rec["result"], classes)
        _write_text(out / LABELS_NAME / rel.with_suffix(".txt"), "".join(line + "\n" for line in lines))
        _link((Path(root) / rel).absolute(), out / IMAGES_NAME / rel)
    data = {"path": str(Path(out).absolute()), "train": IMAGES_NAME, "val": IMAGES_NAME, "nc": len(classes),
            "names": dict(enumerate(classes))}
    _write_text(out / DATA_NAME, "# YOLO dataset written by mdpipe (python -m app.batch)\n"
                + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return [out / LABELS_NAME, out / IMAGES_NAME, out / DATA_NAME]

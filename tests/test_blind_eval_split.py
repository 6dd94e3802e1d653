"""docs/experiments/blind_eval.py --split: the headline metrics over named scene kinds and over the rest.
Runs the shipped model on a dozen eleventh scenes on the CPU (a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scene_labels import load_script

ROOT = Path(__file__).resolve().parent.parent
N = 12


def _run(tmp_path, split):
    out = tmp_path / "report.json"
    weights = str(ROOT / "assets" / "model")
    code = load_script("blind_eval").main(["--generator", "eleventh", "--weights", weights, "--n", str(N),
                         "--dtype", "fp32", "--split", split, "--json", str(out)])
    assert code in (0, None)
    return json.loads(out.read_text(encoding="utf-8"))


def test_split_over_every_kind_equals_the_whole(tmp_path):
    from engine.training.foreign.eleventh import KINDS
    report = _run(tmp_path, "all=" + ",".join(KINDS))
    whole, rest = report["split"]["all"], report["split"]["rest"]
    assert whole["queries"] == N and rest["queries"] == 0
    assert whole["detect_ap50"] == pytest.approx(report["detect"]["ap50"])
    assert whole["point_hit_rate"] == pytest.approx(report["point"]["hit_rate"])
    assert whole["count_exact"] == pytest.approx(report["count_exact"])
    assert whole["empty_accuracy"] == pytest.approx(report["empty_accuracy"])


def test_split_partitions_the_queries(tmp_path):
    report = _run(tmp_path, "cells=stitch,pixelart")
    split = report["split"]
    assert split["kinds"] == ["pixelart", "stitch"]
    assert split["cells"]["queries"] + split["rest"]["queries"] == N


def test_split_without_a_label_is_refused():
    with pytest.raises(SystemExit):
        load_script("blind_eval").main(["--generator", "eleventh", "--n", "1", "--split", "stitch"])

"""docs/experiments/session56_decide.py: session 56's selection rule over evaluation reports (synthetic ones here)."""

from __future__ import annotations

import json

import pytest

from tests.scene_labels import load_script

D = load_script("session56_decide")
KINDS = ("a", "b")


def _blind(ap50=0.9, hit=0.9, exact=0.9, empty=0.9, recall=0.8, kind_hit=None, kind_ap50=None):
    kind_hit, kind_ap50 = kind_hit or {}, kind_ap50 or {}
    return {"detect": {"ap50": ap50, "ground_truth": 1000, "queries": 500, "empty_queries": 100},
            "point": {"hit_rate": hit, "predictions": 1000, "recall": recall},
            "count_exact": exact, "empty_accuracy": empty,
            "breakdowns": {"background": {k: {"queries": 250, "detect_ap50": kind_ap50.get(k, ap50),
                                              "point_hit_rate": kind_hit.get(k, hit)} for k in KINDS}}}


def _own(**kw):
    r = _blind(**kw)
    r["targets"] = {"count_exact": {"value": r["count_exact"], "met": True},
                    "empty_accuracy": {"value": r["empty_accuracy"], "met": True}}
    return r


def _qa(acc=0.8):
    return {"qa": {"per_kind": {k: {"asked": 400, "accuracy": acc} for k in D.QA_KINDS}}}


def _write(tmp_path, monkeypatch, name, chooser=None, guards=None, own=None, indep_met=True, qa=None):
    monkeypatch.setattr(D, "DOCS", tmp_path)
    files = {f"eval-embedded-{name}-twelfth-500-cpu-bf16.json": chooser or _blind(),
             f"eval-embedded-{name}-own-1000-cpu-fp32.json": own or _own(),
             f"eval-embedded-{name}-independent-1000-cpu-fp32.json": {"targets": {"detect_ap50": {"met": indep_met}}},
             f"eval-embedded-{name}-qa-cpu-fp32.json": qa or _qa()}
    for gen in D.BLIND_GUARDS:
        files[f"eval-embedded-{name}-{gen}-500-cpu-bf16.json"] = (guards or {}).get(gen, _blind())
    for f, r in files.items():
        (tmp_path / f).write_text(json.dumps(r))


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    _write(tmp_path, monkeypatch, "ship")


def _decide(*cands):
    return D.main(["--shipped", "ship", *cands])


def test_a_gain_everywhere_ships(shipped, tmp_path, monkeypatch, capsys):
    _write(tmp_path, monkeypatch, "good", chooser=_blind(ap50=0.92, exact=0.92))
    assert _decide("good") == 0 and "ships: good" in capsys.readouterr().out


def test_the_shipped_model_against_itself_does_not_ship(shipped, capsys):
    assert _decide("ship") == 1 and "S +0.00 (< 1.0)" in capsys.readouterr().out


def test_one_kind_losing_fails_clause_one(shipped, tmp_path, monkeypatch, capsys):
    # S gains, but kind a's AP50 loses 6 points: more than its allowance (one SE over 250 queries is 1.9, floor 2)
    _write(tmp_path, monkeypatch, "lopsided", chooser=_blind(ap50=0.93, exact=0.95, kind_ap50={"a": 0.84}))
    assert _decide("lopsided") == 1
    assert "a detect_ap50 90.0→84.0" in capsys.readouterr().out


def test_point_hit_may_fall_only_with_recall_and_every_kind_holding(shipped, tmp_path, monkeypatch, capsys):
    mix = _blind(hit=0.88, recall=0.83, kind_hit={"a": 0.895, "b": 0.895})      # more points on hard kinds
    _write(tmp_path, monkeypatch, "mix", chooser=_blind(ap50=0.92), guards={"tenth": mix})
    assert _decide("mix") == 0
    worse = _blind(hit=0.88, recall=0.83, kind_hit={"a": 0.85})
    _write(tmp_path, monkeypatch, "worse", chooser=_blind(ap50=0.92), guards={"tenth": worse})
    assert _decide("worse") == 1 and "a point_hit_rate 90.0→85.0" in capsys.readouterr().out


def test_guards_within_one_standard_error_hold_beyond_it_fail(shipped, tmp_path, monkeypatch):
    # absent → empty on 100 absent queries at 90 %: one standard error is 3 points
    _write(tmp_path, monkeypatch, "near", chooser=_blind(ap50=0.92), guards={"ninth": _blind(empty=0.875)})
    assert _decide("near") == 0
    _write(tmp_path, monkeypatch, "far", chooser=_blind(ap50=0.92), guards={"ninth": _blind(empty=0.865)})
    assert _decide("far") == 1


def test_own_independent_and_questions_guard(shipped, tmp_path, monkeypatch):
    _write(tmp_path, monkeypatch, "own", chooser=_blind(ap50=0.92), own=_own(exact=0.88))
    _write(tmp_path, monkeypatch, "ind", chooser=_blind(ap50=0.92), indep_met=False)
    _write(tmp_path, monkeypatch, "qa", chooser=_blind(ap50=0.92), qa=_qa(0.78))
    assert _decide("own") == 1 and _decide("ind") == 1 and _decide("qa") == 1


def test_the_best_passing_candidate_ships_and_a_missing_report_is_named(shipped, tmp_path, monkeypatch, capsys):
    _write(tmp_path, monkeypatch, "small", chooser=_blind(ap50=0.92))
    _write(tmp_path, monkeypatch, "big", chooser=_blind(ap50=0.95), own=_own(exact=0.85))    # best, but own fails
    assert _decide("small", "big") == 0 and "ships: small" in capsys.readouterr().out
    (tmp_path / "eval-embedded-small-ninth-500-cpu-bf16.json").unlink()
    assert _decide("small") == 2 and "next: ninth on small" in capsys.readouterr().out


def test_another_chooser_and_no_blind_guards(shipped, tmp_path, monkeypatch, capsys):
    """A later rule names its own chooser and guards: here the ninth chooses and no blind generator guards."""
    _write(tmp_path, monkeypatch, "c", guards={"ninth": _blind(ap50=0.93), "tenth": _blind(empty=0.8)})
    assert D.main(["--shipped", "ship", "--chooser", "ninth", "--guards", "", "c"]) == 0
    assert "clause 1 (ninth) c: passes" in capsys.readouterr().out
    assert D.main(["--shipped", "ship", "--chooser", "ninth", "--guards", "tenth", "c"]) == 1

"""Session 56's selection rule (docs/experiments/session56-data/rule.md), applied to the evaluation reports in docs/.

    python docs/experiments/session56_decide.py [--shipped mean-ship6-41] [--chooser twelfth]
                                                [--guards eleventh,ninth,tenth] CANDIDATE [CANDIDATE ...]

Reads docs/eval-embedded-NAME-GEN-500-cpu-bf16.json (the blind generators), -own-1000-cpu-fp32.json,
-independent-1000-cpu-fp32.json and -qa-cpu-fp32.json for the shipped model and each candidate, prints every
clause's verdict, and names the evaluation to run next when a report the rule needs is missing. The defaults are
session 56's rule; a later rule may name another chooser and other blind guards (session 57's:
docs/experiments/session57-data/rule.md).
Allowances come from the shipped model's figure p on its denominator n: one standard error, 100·sqrt(p(1−p)/n)
points, at least FLOOR.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
CHOOSER, BLIND_GUARDS = "twelfth", ("eleventh", "ninth", "tenth")
FLOOR = 0.5                 # points: the smallest allowance of a headline figure
KIND_FLOOR = 2.0            # points: the smallest allowance of one scene kind's figure
S_GAIN = 1.0                # points: the chooser's score must gain at least this
QA_FLOOR = 1.0              # points: the smallest allowance of the question mean
QA_KINDS = ("count", "yes_no", "colour", "caption")


class Missing(Exception):
    """A report the rule needs has not been made yet."""


def report(name: str, gen: str) -> dict:
    file = {"own": f"eval-embedded-{name}-own-1000-cpu-fp32.json",
            "independent": f"eval-embedded-{name}-independent-1000-cpu-fp32.json",
            "qa": f"eval-embedded-{name}-qa-cpu-fp32.json"}.get(gen, f"eval-embedded-{name}-{gen}-500-cpu-bf16.json")
    path = DOCS / file
    if not path.exists():
        raise Missing(f"{gen} on {name}: docs/{file}")
    return json.loads(path.read_text())


def headlines(r: dict) -> dict:
    """The four figures in points, each with its denominator."""
    t = r.get("targets", {})
    exact = t["count_exact"]["value"] if "count_exact" in t else r["count_exact"]
    empty = t["empty_accuracy"]["value"] if "empty_accuracy" in t else r["empty_accuracy"]
    d, p = r["detect"], r["point"]
    return {"ap50": (100 * d["ap50"], d["ground_truth"]), "hit": (100 * p["hit_rate"], p["predictions"]),
            "exact": (100 * exact, d["queries"]), "empty": (100 * empty, d["empty_queries"])}


def allowance(p: float, n: int, floor: float) -> float:
    q = p / 100
    return max(floor, 100 * math.sqrt(q * (1 - q) / max(n, 1)))


def kinds(r: dict) -> dict:
    return r["breakdowns"]["background"]


def kind_losses(base: dict, cand: dict, key: str) -> list[str]:
    """The scene kinds whose `key` figure loses more than its allowance (on the kind's queries)."""
    out = []
    for kind, b in kinds(base).items():
        c = kinds(cand).get(kind)
        if c is None or b.get(key) is None or c.get(key) is None:
            continue
        p, q = 100 * b[key], 100 * c[key]
        if p - q > allowance(p, b["queries"], KIND_FLOOR):
            out.append(f"{kind} {key} {p:.1f}→{q:.1f}")
    return out


def hit_holds(base: dict, cand: dict) -> tuple[bool, str]:
    """Point hit loses at most its allowance; or, when it loses more, point recall gains at least as much and
    no scene kind's hit loses more than its allowance (more points on hard kinds, none worse)."""
    (p, n), (q, _) = headlines(base)["hit"], headlines(cand)["hit"]
    if p - q <= allowance(p, n, FLOOR):
        return True, ""
    gain = 100 * (cand["point"]["recall"] - base["point"]["recall"])
    bad = kind_losses(base, cand, "point_hit_rate")
    if gain >= p - q and not bad:
        return True, f"hit −{p - q:.2f} with recall +{gain:.2f}, every kind holds"
    return False, f"hit −{p - q:.2f} (recall {gain:+.2f}{'; ' + ', '.join(bad) if bad else ''})"


def figures_hold(base: dict, cand: dict, names=("ap50", "exact", "empty")) -> list[str]:
    hb, hc = headlines(base), headlines(cand)
    out = []
    for k in names:
        (p, n), q = hb[k], hc[k][0]
        a = allowance(p, n, FLOOR)
        if p - q > a:
            out.append(f"{k} −{p - q:.3f} (> {a:.3f})")
    return out


def clause1(ship: str, cand: str, chooser: str = CHOOSER) -> tuple[bool, str, float]:
    b, c = report(ship, chooser), report(cand, chooser)
    hb, hc = headlines(b), headlines(c)
    gain = sum(hc[k][0] for k in hc) - sum(hb[k][0] for k in hb)
    fails = figures_hold(b, c, ("ap50", "hit", "exact", "empty"))
    fails += kind_losses(b, c, "detect_ap50") + kind_losses(b, c, "point_hit_rate")
    if gain < S_GAIN:
        fails.insert(0, f"S {gain:+.2f} (< {S_GAIN})")
    return not fails, "; ".join(fails) or f"S {gain:+.2f}", gain


def guard_blind(ship: str, cand: str, gen: str) -> tuple[bool, str]:
    """Clauses 2-3: AP50, exact and empty within allowance; point hit as `hit_holds` (blind guards and own)."""
    b, c = report(ship, gen), report(cand, gen)
    fails = figures_hold(b, c)
    ok, why = hit_holds(b, c)
    if not ok:
        fails.append(why)
    return not fails, "; ".join(fails) or (why or "holds")


def guard_independent(cand: str) -> tuple[bool, str]:
    t = report(cand, "independent")["targets"]
    missed = [k for k, v in t.items() if v["met"] is False]
    return not missed, ("misses " + ", ".join(missed)) if missed else "every target met"


def qa_mean(r: dict) -> tuple[float, float]:
    per = r["qa"]["per_kind"]
    acc = [per[k]["accuracy"] for k in QA_KINDS]
    se = math.sqrt(sum(a * (1 - a) / per[k]["asked"] for a, k in zip(acc, QA_KINDS))) / len(QA_KINDS)
    return 100 * sum(acc) / len(acc), 100 * se


def guard_qa(ship: str, cand: str) -> tuple[bool, str]:
    (p, se), (q, _) = qa_mean(report(ship, "qa")), qa_mean(report(cand, "qa"))
    a = max(QA_FLOOR, se)
    return p - q <= a, f"mean {p:.2f}→{q:.2f} (allowance {a:.2f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shipped", default="mean-ship6-41")
    ap.add_argument("--chooser", default=CHOOSER, help="the blind generator that ranks the candidates")
    ap.add_argument("--guards", default=",".join(BLIND_GUARDS), help="blind generators checked after it, in order")
    ap.add_argument("candidates", nargs="+")
    a = ap.parse_args(argv)
    chooser, guards = a.chooser, tuple(g for g in a.guards.split(",") if g)
    ranked = []
    for cand in a.candidates:
        try:
            ok, why, gain = clause1(a.shipped, cand, chooser)
        except Missing as e:
            print(f"next: {e}")
            return 2
        print(f"clause 1 ({chooser}) {cand}: {'passes' if ok else 'fails'}: {why}")
        if ok:
            ranked.append((gain, cand))
    for gain, cand in sorted(ranked, reverse=True):
        verdicts = []
        try:
            for gen in guards:
                verdicts.append((gen, *guard_blind(a.shipped, cand, gen)))
                if not verdicts[-1][1]:
                    break
            else:
                verdicts.append(("own", *guard_blind(a.shipped, cand, "own")))     # the same clause as a blind guard
                if verdicts[-1][1]:
                    verdicts.append(("independent", *guard_independent(cand)))
                if verdicts[-1][1]:
                    verdicts.append(("questions", *guard_qa(a.shipped, cand)))
        except Missing as e:
            for gen, ok, why in verdicts:
                print(f"  {cand} {gen}: {'holds' if ok else 'fails'}: {why}")
            print(f"next: {e}")
            return 2
        for gen, ok, why in verdicts:
            print(f"  {cand} (S {gain:+.2f}) {gen}: {'holds' if ok else 'fails'}: {why}")
        if all(v[1] for v in verdicts):
            print(f"ships: {cand}")
            return 0
    print("ships: nothing; the shipped model stays")
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""Churn without leaks: a short `python -m engine.soak` (600 requests, 20 % cancelled) in a subprocess.

The soak driver mixes bursts, cancellations at random moments, 1 ms deadlines, corrupt images and
bad prompts against one serving engine, then checks every pool against its baseline and exits 1 on
any leak or unexpected failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_soak_600_requests_leaves_no_leak():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "engine.soak", "--requests", "600", "--cancel-rate", "0.2"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pools back to baseline" in r.stdout, r.stdout
    assert "600 requests in" in r.stdout and "failed 0" in r.stdout, r.stdout
    counts = dict(part.rsplit(" ", 1) for part in r.stdout.splitlines()[0].split(": ", 1)[1].split(", "))
    assert int(counts["cancelled"]) > 0 and int(counts["rejected"]) > 0 and int(counts["completed"]) > 300, counts
    assert "Traceback" not in r.stderr

"""`python -m engine.verify`: reference decoder vs pipelined engine, with the logit comparison."""

from __future__ import annotations

import re

import pytest
from PIL import Image

import engine.tools.verify as verify
from engine.verify import main

from .conftest import CPU_AUTO_DTYPE, random_image, torch_threads


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify_samples")
    Image.fromarray(random_image(3, 90, 120)).save(folder / "a.png")
    return folder


def run(capsys, *args):
    with torch_threads(1):
        code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_identical_outputs_pass(capsys, eager_ckpt, samples):
    code, out, err = run(capsys, "--weights", str(eager_ckpt), "--samples", str(samples), "--objects", "red circle",
                         "--max-objects", "3", "--steps", "4")
    assert code == 0, out + err
    assert out.splitlines()[0].startswith(f"model: {eager_ckpt} · ") and f"· cpu · {CPU_AUTO_DTYPE}" in out
    rows = [line for line in out.splitlines() if line.startswith("a.png")]
    # The eager checkpoint always continues, to the cap or until the repetition guard stops a
    # duplicate (the same rule in both decoders): same counts, identical outputs.
    counts = [re.search(r"reference  (\d+)  pipelined  (\d+)  identical", r) for r in rows]
    assert len(rows) == 2 and all(m and m.group(1) == m.group(2) and 1 <= int(m.group(1)) <= 3 for m in counts), out
    assert all("(3 decisions)" in r for r in rows), out
    worst = float(re.search(r"max \|logit difference\| over the first 4 decisions: (\S+)", out).group(1))
    assert 0 <= worst < 1e-3
    assert "PASS: 2/2 outputs identical" in out


def test_a_difference_fails(capsys, eager_ckpt, samples, monkeypatch):
    real = verify.reference_generate

    def off_by_one(*args, **kwargs):
        result = real(*args, **kwargs)
        key = next(iter(result))
        return {key: result[key][:-1]}

    monkeypatch.setattr(verify, "reference_generate", off_by_one)
    code, out, _ = run(capsys, "--weights", str(eager_ckpt), "--samples", str(samples), "--objects", "star",
                       "--max-objects", "2", "--steps", "2")
    assert code == 1 and "DIFFERENT" in out and "FAIL: 0/2 outputs identical" in out


def test_unusable_weights_exit_2(capsys, tmp_path):
    code, out, err = run(capsys, "--weights", str(tmp_path / "none"))
    assert code == 2 and out == "" and err.startswith("error: ") and "not a checkpoint directory" in err


def test_compare_identical_agrees_and_differs():
    box = {"x_min": 0.1, "y_min": 0.2, "x_max": 0.3, "y_max": 0.4, "score": 0.9}
    ref = {"objects": [box]}
    assert verify.compare(ref, {"objects": [dict(box)]}, 0.0, 1e-3) == ("identical", 0.0, 0.0)
    # a score rounded the other way agrees in fp32; a moved coordinate does not
    assert verify.compare(ref, {"objects": [{**box, "score": 0.9001}]}, 0.0, 1e-3)[0] == "agrees"
    assert verify.compare(ref, {"objects": [{**box, "x_min": 0.101}]}, 0.0, 1e-3)[0] == "DIFFERENT"
    # reduced precision: within the tolerances agrees, beyond them differs, another count always differs
    status, dc, ds = verify.compare(ref, {"objects": [{**box, "x_min": 0.105, "score": 0.88}]}, *verify.REDUCED)
    assert status == "agrees" and abs(dc - 0.005) < 1e-9 and abs(ds - 0.02) < 1e-9
    assert verify.compare(ref, {"objects": [{**box, "y_max": 0.42}]}, *verify.REDUCED)[0] == "DIFFERENT"
    assert verify.compare(ref, {"objects": [{**box, "score": 0.8}]}, *verify.REDUCED)[0] == "DIFFERENT"
    assert verify.compare(ref, {"objects": []}, *verify.REDUCED)[0] == "DIFFERENT"
    # two objects whose order a rounding difference swapped still agree, pair by pair
    other = {"x_min": 0.6, "y_min": 0.6, "x_max": 0.7, "y_max": 0.8, "score": 0.8}
    status, dc, _ = verify.compare({"objects": [box, other]}, {"objects": [other, {**box, "x_min": 0.102}]},
                                   *verify.REDUCED)
    assert status == "agrees" and abs(dc - 0.002) < 1e-9
    pts = {"points": [{"x": 0.5, "y": 0.5, "score": 0.7}]}
    assert verify.compare(pts, {"points": [{"x": 0.503, "y": 0.5, "score": 0.7}]}, *verify.REDUCED)[0] == "agrees"

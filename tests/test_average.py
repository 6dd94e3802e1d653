"""engine/training/average.py: the mean of several checkpoints of one architecture, refused
for checkpoints that differ in architecture or tokenizer or for fewer than two."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from engine.model.checkpoint import CheckpointError, load_model, random_state_dict, save_checkpoint
from engine.model.config import TINY
from engine.serving.engine import DEFAULT_WEIGHTS
from engine.training.average import average_checkpoints, main
from engine.training.grow import grown_config
from engine.training.scenes import SCENE_VOCABULARY

TOKENIZER = (DEFAULT_WEIGHTS / "tokenizer.json").read_text()


def _checkpoint(path, seed, config=TINY):
    return save_checkpoint(path, random_state_dict(config, seed=seed), config, TOKENIZER, preset="tiny",
                           vocabulary=SCENE_VOCABULARY)


def test_the_average_is_the_mean_of_every_weight_and_loads(tmp_path):
    sources = [_checkpoint(tmp_path / f"s{k}", seed=k) for k in range(3)]
    out = average_checkpoints(sources, tmp_path / "avg")
    states = [load_file(s / "model.safetensors") for s in sources]
    avg = load_file(out / "model.safetensors")
    assert avg.keys() == states[0].keys()
    for key, value in avg.items():
        mean = sum(s[key].double() for s in states) / 3
        assert value.dtype == states[0][key].dtype
        assert torch.equal(value, mean.to(value.dtype)), key
    assert any(not torch.equal(v, states[0][k]) for k, v in avg.items())   # seeds differ: the mean is new
    assert load_model(out).config == TINY
    assert (out / "tokenizer.json").read_text() == TOKENIZER


def test_the_mean_of_one_checkpoint_twice_is_that_checkpoint(tmp_path):
    a = _checkpoint(tmp_path / "a", seed=1)
    out = average_checkpoints([a, a], tmp_path / "avg")
    assert load_file(out / "model.safetensors").keys() == load_file(a / "model.safetensors").keys()
    for key, value in load_file(out / "model.safetensors").items():
        assert torch.equal(value, load_file(a / "model.safetensors")[key])


def test_checkpoints_of_different_architectures_are_refused(tmp_path, capsys):
    a = _checkpoint(tmp_path / "a", seed=1)
    b = _checkpoint(tmp_path / "b", seed=2, config=grown_config(TINY, text_layers=1))
    with pytest.raises(CheckpointError, match="config.json differs"):
        average_checkpoints([a, b], tmp_path / "avg")
    assert main(["--out", str(tmp_path / "avg"), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "avg").exists()


def test_one_checkpoint_or_a_missing_one_is_refused(tmp_path):
    a = _checkpoint(tmp_path / "a", seed=1)
    with pytest.raises(CheckpointError, match="two or more"):
        average_checkpoints([a], tmp_path / "avg")
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        average_checkpoints([a, tmp_path / "nothing"], tmp_path / "avg")

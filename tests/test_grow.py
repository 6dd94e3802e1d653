"""engine/training/grow.py: a deeper model that computes what the shipped one computes, and
`engine.train --init DIR --grow-text-layers N --grow-vision-layers M` starting from it."""

from __future__ import annotations

import json

import pytest
import torch

from engine.model.checkpoint import load_model, save_checkpoint
from engine.model.config import EMBEDDED, TINY
from engine.serving.engine import DEFAULT_WEIGHTS, Engine
from engine.training import train as T
from engine.training.evaluate import generate, run_requests
from engine.training.grow import grow, grown_config, same_but_depth
from engine.training.scenes import SCENE_VOCABULARY
from tests.test_train import GOLDEN_SCENES


def test_a_grown_model_gives_the_shipped_models_answers(tmp_path, one_thread):
    model = load_model(DEFAULT_WEIGHTS, dtype="fp32", device="cpu")
    grown = grow(model, text_layers=2, vision_layers=1)
    assert (grown.config.text.n_layers, grown.config.vision.n_layers) == (model.config.text.n_layers + 2,
                                                                         model.config.vision.n_layers + 1)
    # the last text block (whose attention the grounding loss supervises) stays last
    assert torch.equal(grown.text.blocks[-1].attn.qkv.weight, model.text.blocks[-1].attn.qkv.weight)
    assert torch.equal(grown.text.blocks[-2].attn.proj.weight, torch.zeros_like(model.text.blocks[-1].attn.proj.weight))
    save_checkpoint(tmp_path, T.checkpoint_state(grown), grown.config, (DEFAULT_WEIGHTS / "tokenizer.json").read_text(),
                    preset="embedded", vocabulary=SCENE_VOCABULARY)
    assert load_model(tmp_path).config == grown.config
    data = generate("independent", 7, 12)
    answers = {}
    for name, weights in (("shipped", DEFAULT_WEIGHTS), ("grown", tmp_path)):
        engine = Engine.from_pretrained(weights, device="cpu", dtype="fp32", max_batch=4)
        answers[name] = [run_requests(engine, data, skill)[0] for skill in ("detect", "point")]
    assert answers["grown"] == answers["shipped"]
    assert sum(len(r.get("objects", [])) for r in answers["shipped"][0]) > 0   # the comparison has objects in it


def test_grown_configs_differ_only_in_depth():
    deeper = grown_config(TINY, text_layers=1, vision_layers=3)
    assert same_but_depth(TINY, deeper) and same_but_depth(deeper, TINY) and deeper != TINY
    assert not same_but_depth(TINY, EMBEDDED)
    with pytest.raises(ValueError, match="0 or more"):
        grown_config(TINY, text_layers=-1)


def test_training_from_a_grown_init_writes_the_deeper_model(tmp_path, one_thread):
    kw = dict(preset="tiny", device="cpu", workers=0, quiet=True, batch=2, queries=1, log_every=1, save_every=1e9,
              heldout=0, scene=GOLDEN_SCENES)
    T.train(tmp_path / "base", steps=1, **kw)
    T.train(tmp_path / "deep", steps=2, init=str(tmp_path / "base"), grow_text_layers=1, grow_vision_layers=2, **kw)
    deep = load_model(tmp_path / "deep")
    assert (deep.config.text.n_layers, deep.config.vision.n_layers) == (TINY.text.n_layers + 1, TINY.vision.n_layers + 2)
    # trained: the new blocks' output projections left zero
    assert deep.text.blocks[-2].attn.proj.weight.abs().sum() > 0
    start = json.loads((tmp_path / "deep" / "train_log.jsonl").read_text().splitlines()[0])
    assert start["recipe"]["grow_text_layers"] == 1 and start["recipe"]["grow_vision_layers"] == 2
    T.train(tmp_path / "again", steps=1, init=str(tmp_path / "deep"), **kw)   # a grown checkpoint continues as it is
    assert load_model(tmp_path / "again").config == deep.config
    with pytest.raises(ValueError, match="give --init"):
        T.train(tmp_path / "bad", steps=1, grow_text_layers=1, **kw)


def test_the_grow_flags_need_init(capsys):
    for bad, words in ((["--grow-text-layers", "1"], "deepens an --init checkpoint"),
                       (["--init", "x", "--grow-vision-layers", "99"], "between 0 and 16")):
        with pytest.raises(SystemExit):
            T.main(["--out", "unused", *bad])
        assert words in capsys.readouterr().err


def test_an_init_with_another_tiling_cap_trains_with_its_own(tmp_path, one_thread):
    kw = dict(preset="tiny", device="cpu", workers=0, quiet=True, batch=2, queries=1, log_every=1, save_every=1e9,
              heldout=0, scene=GOLDEN_SCENES)
    T.train(tmp_path / "base", steps=1, **kw)
    path = tmp_path / "base" / "config.json"
    meta = json.loads(path.read_text())
    meta["config"]["vision"]["max_crops"] = TINY.vision.max_crops + 3
    path.write_text(json.dumps(meta))
    T.train(tmp_path / "more", steps=1, init=str(tmp_path / "base"), **kw)
    assert load_model(tmp_path / "more").config.vision.max_crops == TINY.vision.max_crops + 3
    meta["config"]["vision"]["overlap_margin"] = TINY.vision.overlap_margin + 1   # any other difference: refused
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="another config than preset"):
        T.train(tmp_path / "bad", steps=1, init=str(tmp_path / "base"), **kw)

"""`--weights org/name[@REV]` and `--tokenizer`: Hub ids resolved from a pre-populated Hugging Face
cache (standard layout, HF_HUB_OFFLINE=1: no test touches the network), the starmie tokenizer checks,
and the device/dtype resolution with its CUDA errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from tokenizers import Tokenizer, models

from engine import CheckpointError, DeviceError, Engine
from engine.model import device as device_mod
from engine.model.config import TINY
from engine.model.hub import DEFAULT_REVISIONS, parse_source
from engine.model.pretrained import check_pretrained, load_pretrained
from engine.model.tokenizer import STARMIE_ID, resolve_tokenizer, starmie_problems

from .conftest import CPU_AUTO_DTYPE, checkpoint_files, hf_cache_snapshot

ROOT = Path(__file__).resolve().parents[1]
FIX = "pass --tokenizer"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty, offline Hugging Face cache of this test."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def gpt2_style_tokenizer() -> Tokenizer:
    """The shape of the stale tokenizer.json in vikhyatk/moondream2: `!` = 0, `<|endoftext|>` = 50256."""
    vocab = {"!": 0, '"': 1, "#": 2, "<|endoftext|>": 50256, "[UNK]": 3}
    return Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))


def test_the_session_is_offline():
    assert os.environ["HF_HUB_OFFLINE"] == "1" and huggingface_hub.constants.HF_HUB_OFFLINE


# ---- parsing ---------------------------------------------------------------------------------

def test_hub_ids_and_local_paths(tmp_path, monkeypatch):
    src = parse_source("vikhyatk/moondream2")
    assert (src.repo_id, src.revision) == ("vikhyatk/moondream2", "2025-06-21") == \
        ("vikhyatk/moondream2", DEFAULT_REVISIONS["vikhyatk/moondream2"])
    assert src.label == "vikhyatk/moondream2@2025-06-21"
    assert parse_source("vikhyatk/moondream2@2025-01-09").revision == "2025-01-09"
    assert parse_source("org/name").revision is None and parse_source("org/name").label == "org/name"
    assert parse_source("org/name", revision="v2").label == "org/name@v2"
    with pytest.raises(CheckpointError, match="give one"):
        parse_source("org/name@a", revision="b")
    for local in ("/abs/dir", "./rel", "a/b/c", "dir"):
        assert parse_source(local).repo_id is None
    # a local directory that exists wins over the Hub id it resembles
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert parse_source("org/name").path == Path("org/name")


# ---- weights from the cache ----------------------------------------------------------------------

def test_hub_id_loads_from_the_cache_like_the_directory(hub_cache, tiny_ckpt, small_image):
    hf_cache_snapshot(hub_cache, "acme/tiny-moondream", "v1", checkpoint_files(tiny_ckpt))
    hub_engine = Engine.from_pretrained("acme/tiny-moondream@v1", max_batch=2)
    info = hub_engine.model_info
    assert info.label == "acme/tiny-moondream@v1" and (info.device, info.dtype) == ("cpu", CPU_AUTO_DTYPE)
    assert info.parameters == sum(p.numel() for p in hub_engine.model.parameters()) > 0
    assert info.describe().startswith("acme/tiny-moondream@v1 · ")
    assert info.describe().endswith(f" · cpu · {CPU_AUTO_DTYPE}")
    local_engine = Engine.from_pretrained(tiny_ckpt, max_batch=2)
    assert local_engine.model_info.label == str(tiny_ckpt)
    for skill in ("detect", "point"):
        assert hub_engine.submit(small_image, skill, "red circle", max_objects=3).result() == \
            local_engine.submit(small_image, skill, "red circle", max_objects=3).result()


def test_missing_file_while_offline_is_a_clear_error(hub_cache, tiny_ckpt):
    hf_cache_snapshot(hub_cache, "acme/partial", "main", checkpoint_files(tiny_ckpt, ("config.json",)))
    with pytest.raises(CheckpointError, match=r"acme/partial@main: model\.safetensors not in the Hugging Face cache "
                                              r"and HF_HUB_OFFLINE=1 is set; download it once online"):
        load_pretrained("acme/partial@main")
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache and HF_HUB_OFFLINE=1"):
        load_pretrained("acme/never-downloaded")
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache"):
        load_pretrained("acme/partial@other-revision")
    # the pinned default revision is what is looked up
    with pytest.raises(CheckpointError, match=r"vikhyatk/moondream2@2025-06-21: .*HF_HUB_OFFLINE=1"):
        check_pretrained("vikhyatk/moondream2")


def test_missing_local_directory_names_both_forms(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint directory; .* Hub id such as vikhyatk/moondream2"):
        load_pretrained(tmp_path / "nowhere")


# ---- tokenizer checks -------------------------------------------------------------------------------

def test_starmie_style_tokenizer_passes(tokenizer, tiny_ckpt):
    assert starmie_problems(tokenizer, TINY) == []
    tok, label = resolve_tokenizer(None, tiny_ckpt, TINY)
    assert label == str(tiny_ckpt / "tokenizer.json") and tok.to_str() == tokenizer.to_str()
    tok, label = resolve_tokenizer(str(tiny_ckpt / "tokenizer.json"), tiny_ckpt, TINY)
    assert label == str(tiny_ckpt / "tokenizer.json")


def test_gpt2_style_tokenizer_is_refused_with_the_fix(tmp_path, tiny_ckpt, hub_cache):
    path = tmp_path / "gpt2.json"
    gpt2_style_tokenizer().save(str(path))
    problems = starmie_problems(gpt2_style_tokenizer(), TINY)
    assert any("<|endoftext|> = 50256: a GPT-2-style tokenizer" in p for p in problems), problems
    with pytest.raises(ValueError, match=f"{path}.*GPT-2-style.*{FIX}"):
        resolve_tokenizer(str(path), tiny_ckpt, TINY)
    # in the weights directory, without --tokenizer: refused, and starmie is not cached (offline)
    weights = tmp_path / "weights"
    weights.mkdir()
    for name, data in checkpoint_files(tiny_ckpt, ("model.safetensors", "config.json")).items():
        (weights / name).write_bytes(data)
    path.replace(weights / "tokenizer.json")
    with pytest.raises(CheckpointError, match=f"is not a starmie tokenizer .*GPT-2-style.*{STARMIE_ID} is "
                                              f"unavailable .*HF_HUB_OFFLINE=1.*{FIX}"):
        Engine.from_pretrained(weights)


def test_a_refused_local_tokenizer_falls_back_to_cached_starmie(tmp_path, tiny_ckpt, tokenizer, hub_cache):
    weights = tmp_path / "weights"
    weights.mkdir()
    for name, data in checkpoint_files(tiny_ckpt, ("model.safetensors", "config.json")).items():
        (weights / name).write_bytes(data)
    gpt2_style_tokenizer().save(str(weights / "tokenizer.json"))
    hf_cache_snapshot(hub_cache, STARMIE_ID, "main", {"tokenizer.json": tokenizer.to_str().encode()})
    engine = Engine.from_pretrained(weights)
    assert engine.model_info.tokenizer == STARMIE_ID
    assert engine.tokenizer.to_str() == tokenizer.to_str()


def test_vocabulary_larger_than_the_model_is_refused(tmp_path, tiny_ckpt, tokenizer):
    big = Tokenizer.from_str(tokenizer.to_str())
    big.add_tokens([f"word{i}" for i in range(TINY.text.vocab_size)])
    path = tmp_path / "big.json"
    big.save(str(path))
    with pytest.raises(CheckpointError, match=f"it has {big.get_vocab_size()} tokens but the model only 512.*{FIX}"):
        Engine.from_pretrained(tiny_ckpt, tokenizer=str(path))


def test_corrupt_tokenizer_json_is_refused(tmp_path, tiny_ckpt, hub_cache):
    path = tmp_path / "tokenizer.json"
    path.write_text("{ not json")
    with pytest.raises(CheckpointError, match="cannot load tokenizer"):
        Engine.from_pretrained(tiny_ckpt, tokenizer=str(path))
    weights = tmp_path / "weights"
    weights.mkdir()
    for name, data in checkpoint_files(tiny_ckpt, ("model.safetensors", "config.json")).items():
        (weights / name).write_bytes(data)
    (weights / "tokenizer.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=f"no usable tokenizer: cannot load tokenizer.*{FIX}"):
        Engine.from_pretrained(weights)


def test_special_ids_are_checked_by_name():
    """answer 3, coord 5, size 6 must be <|md_reserved_2|>, <|md_reserved_4|>, <|md_reserved_5|>."""
    names = [f"<|md_reserved_{k}|>" for k in range(9)]
    names[3], names[4] = names[4], names[3]          # coord (id 5) holds the wrong token
    vocab = {"<|endoftext|>": 0, **{n: i + 1 for i, n in enumerate(names)}, "detect": 10, "point": 11, "[UNK]": 12}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    assert starmie_problems(tok, TINY) == ["special ids differ from starmie's: <|md_reserved_4|> is 4, not 5"]


def test_template_ids_must_exist(tokenizer):
    import dataclasses

    cfg = dataclasses.replace(TINY, tokens=dataclasses.replace(TINY.tokens, detect_prefix=(1, 600, 2)))
    assert any("template ids [600]" in p for p in starmie_problems(tokenizer, cfg))


def test_tokenizer_from_a_hub_id(hub_cache, tokenizer, tiny_ckpt):
    hf_cache_snapshot(hub_cache, "acme/tok", "main", {"tokenizer.json": tokenizer.to_str().encode()})
    tok, label = resolve_tokenizer("acme/tok@main", tiny_ckpt, TINY)
    assert label == "acme/tok@main" and tok.to_str() == tokenizer.to_str()


# ---- device / dtype ---------------------------------------------------------------------------------

def test_auto_device_and_dtype(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "cpu_computes_bf16", lambda: False)
    assert device_mod.resolve("auto", "auto") == (torch.device("cpu"), "fp32")
    monkeypatch.setattr(device_mod, "cpu_computes_bf16", lambda: True)   # AVX512-BF16 or AMX: bf16 is the faster
    assert device_mod.resolve("auto", "auto") == (torch.device("cpu"), "bf16")
    assert device_mod.resolve("cpu", "fp32") == (torch.device("cpu"), "fp32")
    assert device_mod.resolve("cpu", "bf16") == (torch.device("cpu"), "bf16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert device_mod.resolve("auto", "auto") == (torch.device("cuda", 0), "bf16")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert device_mod.resolve_dtype("auto", torch.device("cuda", 0)) == "fp16"


def test_cuda_without_cuda_says_why_and_how(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(DeviceError, match="built without CUDA; install a CUDA build of torch .* or use --device cpu"):
        device_mod.resolve("cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="sees no GPU .*nvidia-smi"):
        device_mod.resolve("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DeviceError, match=r"only 2 CUDA device\(s\) visible"):
        device_mod.resolve("cuda:2")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        device_mod.resolve("tpu")
    with pytest.raises(DeviceError, match="unknown dtype 'fp8'"):
        device_mod.resolve("cpu", "fp8")


# ---- the command line, end to end (a subprocess with the offline cache in its environment) ----------

def test_cli_hub_id_prints_the_model_line_and_refuses_cuda(hub_cache, eager_ckpt, small_image_png):
    hf_cache_snapshot(hub_cache, "acme/eager", "2025-06-21", checkpoint_files(eager_ckpt))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "engine", "detect", str(small_image_png), "red circle",
                               "--max-objects", "2", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)

    ok = cli("--weights", "acme/eager@2025-06-21")
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["objects"]) == 2
    assert ok.stderr.strip().splitlines()[-1].startswith("model: acme/eager@2025-06-21 · ") and \
        ok.stderr.strip().endswith(f"parameters · cpu · {CPU_AUTO_DTYPE}"), ok.stderr
    bad = cli("--weights", "acme/eager@2025-06-21", "--device", "cuda")
    if torch.version.cuda is None:
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr.strip() == (f"error: --device cuda: this PyTorch ({torch.__version__}) is built without "
                                      "CUDA; install a CUDA build of torch (https://pytorch.org/get-started/locally/) "
                                      "or use --device cpu")


def test_batch_tool_takes_a_hub_id_and_names_the_model(hub_cache, eager_ckpt, small_image_png, tmp_path, capsys):
    from app.batch import main as batch_main

    hf_cache_snapshot(hub_cache, "acme/eager", "main", checkpoint_files(eager_ckpt))
    src = tmp_path / "images"
    src.mkdir()
    (src / "a.png").write_bytes(small_image_png.read_bytes())
    out = tmp_path / "out"
    code = batch_main([str(src), "--task", "point", "--object", "red circle", "--max-objects", "2", "--quiet",
                       "--weights", "acme/eager@main", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert any(line.startswith("model: acme/eager@main · ") and line.endswith(f" · cpu · {CPU_AUTO_DTYPE}")
               for line in err.splitlines()), err
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert len(record["result"]["points"]) == 2
    assert batch_main([str(src), "--task", "point", "--object", "red circle", "--quiet", "--weights",
                       "acme/missing", "--out", str(tmp_path / "out2")]) == 2
    assert "cannot load the model: acme/missing: " in capsys.readouterr().err

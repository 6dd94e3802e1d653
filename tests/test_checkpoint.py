"""Checkpoint layout and loader: the documented Moondream 2 key list, round trips, bad files.

The Moondream 2 checks build the model on the meta device only (no 4 GB allocation).
Every bad-checkpoint case must end in one `CheckpointError` whose message names the problem,
raised before any model is allocated or any tensor data is read (`forbid_loading`).
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import pytest
import torch

import engine.model.checkpoint as ckpt
from engine.model.checkpoint import (
    CheckpointError,
    expected_tensors,
    load_config,
    load_model,
    random_state_dict,
    read_header,
    save_checkpoint,
)
from engine.model.config import MOONDREAM2, TINY, MoondreamConfig

from .conftest import torch_threads, write_tiny_checkpoint


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


# ---------------------------------------------------------------------------------------------
# Moondream 2 §8.2, transcribed table by table
# ---------------------------------------------------------------------------------------------

VISION_FIXED = {
    "model.vision.patch_emb.weight": [1152, 588],
    "model.vision.patch_emb.bias": [1152],
    "model.vision.pos_emb": [1, 729, 1152],
    "model.vision.post_ln.weight": [1152],
    "model.vision.post_ln.bias": [1152],
    "model.vision.proj_mlp.fc1.weight": [8192, 2304],
    "model.vision.proj_mlp.fc1.bias": [8192],
    "model.vision.proj_mlp.fc2.weight": [2048, 8192],
    "model.vision.proj_mlp.fc2.bias": [2048],
}
VISION_BLOCK = {  # prefix model.vision.blocks.{i}., i = 0…26
    "ln1.weight": [1152], "ln1.bias": [1152], "ln2.weight": [1152], "ln2.bias": [1152],
    "attn.qkv.weight": [3456, 1152], "attn.qkv.bias": [3456],
    "attn.proj.weight": [1152, 1152], "attn.proj.bias": [1152],
    "mlp.fc1.weight": [4304, 1152], "mlp.fc1.bias": [4304],
    "mlp.fc2.weight": [1152, 4304], "mlp.fc2.bias": [1152],
}
VISION_LAYERS = 27
TEXT_FIXED = {
    "model.text.wte": [51200, 2048],
    "model.text.post_ln.weight": [2048],
    "model.text.post_ln.bias": [2048],
    "model.text.lm_head.weight": [51200, 2048],
    "model.text.lm_head.bias": [51200],
}
TEXT_BLOCK = {  # prefix model.text.blocks.{i}., i = 0…23
    "ln.weight": [2048], "ln.bias": [2048],
    "attn.qkv.weight": [6144, 2048], "attn.qkv.bias": [6144],
    "attn.proj.weight": [2048, 2048], "attn.proj.bias": [2048],
    "mlp.fc1.weight": [8192, 2048], "mlp.fc1.bias": [8192],
    "mlp.fc2.weight": [2048, 8192], "mlp.fc2.bias": [2048],
}
TEXT_LAYERS = 24
REGION = {
    "model.region.coord_features": [1, 128],
    "model.region.coord_encoder.weight": [2048, 256],
    "model.region.coord_encoder.bias": [2048],
    "model.region.coord_decoder.fc1.weight": [8192, 2048],
    "model.region.coord_decoder.fc1.bias": [8192],
    "model.region.coord_decoder.fc2.weight": [1024, 8192],
    "model.region.coord_decoder.fc2.bias": [1024],
    "model.region.size_features": [2, 256],
    "model.region.size_encoder.weight": [2048, 512],
    "model.region.size_encoder.bias": [2048],
    "model.region.size_decoder.fc1.weight": [8192, 2048],
    "model.region.size_decoder.fc1.bias": [8192],
    "model.region.size_decoder.fc2.weight": [2048, 8192],
    "model.region.size_decoder.fc2.bias": [2048],
}
# §8.3: component → (tensors, parameters)
DOCUMENTED_COUNTS = {
    "vision": (329, 412_987_248),  # without the projection MLP
    "projection": (4, 35_661_824),
    "text": (245, 1_418_270_720),
    "region": (14, 60_317_312),
}
DOCUMENTED_TOTAL = (592, 1_927_237_104)


def documented_keys() -> dict[str, tuple[int, ...]]:
    keys = {k: tuple(v) for k, v in VISION_FIXED.items()}
    for i in range(VISION_LAYERS):
        keys.update({f"model.vision.blocks.{i}.{s}": tuple(v) for s, v in VISION_BLOCK.items()})
    keys.update({k: tuple(v) for k, v in TEXT_FIXED.items()})
    for i in range(TEXT_LAYERS):
        keys.update({f"model.text.blocks.{i}.{s}": tuple(v) for s, v in TEXT_BLOCK.items()})
    keys.update({k: tuple(v) for k, v in REGION.items()})
    return keys


def component(key: str) -> str:
    if key.startswith("model.vision.proj_mlp."):
        return "projection"
    return key.split(".")[1]


def test_documented_table_is_592_keys():
    # Guards the transcription itself: 9 + 12·27 + 5 + 10·24 + 14.
    assert (len(VISION_FIXED), len(VISION_BLOCK), len(TEXT_FIXED), len(TEXT_BLOCK), len(REGION)) == (9, 12, 5, 10, 14)
    assert len(documented_keys()) == 9 + 12 * 27 + 5 + 10 * 24 + 14 == 592


def test_moondream2_keys_and_shapes_match_the_documented_list_exactly():
    found = expected_tensors(MOONDREAM2)
    documented = documented_keys()
    assert sorted(set(found) - set(documented)) == [], "keys the documented checkpoint does not have"
    assert sorted(set(documented) - set(found)) == [], "documented keys the model does not have"
    wrong = {k: (found[k], documented[k]) for k in documented if found[k] != documented[k]}
    assert wrong == {}
    assert len(found) == 592


def test_moondream2_parameter_counts_per_component():
    found = expected_tensors(MOONDREAM2)
    counts: dict[str, list[int]] = {}
    for key, shape in found.items():
        c = counts.setdefault(component(key), [0, 0])
        c[0] += 1
        c[1] += math.prod(shape)
    assert {k: tuple(v) for k, v in counts.items()} == DOCUMENTED_COUNTS
    assert (sum(v[0] for v in counts.values()), sum(v[1] for v in counts.values())) == DOCUMENTED_TOTAL
    # The documented table itself adds up to the same numbers.
    doc = documented_keys()
    assert sum(math.prod(s) for s in doc.values()) == DOCUMENTED_TOTAL[1]


def test_moondream2_model_has_no_persistent_buffers():
    # §8.4: rotary tables and masks are not stored; the state dict is exactly the parameters.
    model = ckpt.MoondreamModel(MOONDREAM2, device="meta")
    assert list(model.state_dict()) == [n for n, _ in model.named_parameters()]


def test_tiny_preset_has_the_same_key_set():
    # Same architecture, smaller dims and 2 layers per tower: the same key names, so the loader
    # paths the tiny tests exercise are the ones the real checkpoint takes.
    def two_layers(key: str) -> bool:
        parts = key.split(".")
        return not (parts[2] == "blocks" and int(parts[3]) >= 2)

    assert set(expected_tensors(TINY)) == {k for k in documented_keys() if two_layers(k)}


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,torch_dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16),
                                               ("fp64", torch.float64), (torch.float64, torch.float64)])
def test_tiny_checkpoint_round_trips(tiny_ckpt, tiny_state, dtype, torch_dtype):
    model = load_model(tiny_ckpt, dtype=dtype)
    assert model.config == TINY
    state = model.state_dict()
    assert set(ckpt.KEY_PREFIX + k for k in state) == set(tiny_state)
    for key, saved in tiny_state.items():
        loaded = state[key[len(ckpt.KEY_PREFIX):]]
        assert loaded.dtype == torch_dtype, key
        assert loaded.device.type == "cpu"
        assert loaded.shape == saved.shape, key
        assert torch.equal(loaded, saved.to(torch_dtype)), key  # bf16 → wider types is exact
    assert not model.training


def test_random_state_dict_layout():
    state = random_state_dict(TINY, seed=3)
    assert {k: tuple(v.shape) for k, v in state.items()} == expected_tensors(TINY)
    assert all(v.dtype == torch.bfloat16 and v.is_contiguous() for v in state.values())
    assert torch.equal(state["model.text.post_ln.weight"], torch.ones(TINY.text.dim, dtype=torch.bfloat16))
    assert torch.equal(state["model.text.lm_head.bias"], torch.zeros(TINY.text.vocab_size, dtype=torch.bfloat16))
    assert 0.01 < state["model.text.wte"].float().std() < 0.04
    assert 0.5 < state["model.region.size_features"].float().std() < 2.0  # Fourier matrices: std 1
    # Deterministic per seed, different across seeds.
    assert torch.equal(random_state_dict(TINY, seed=3)["model.text.wte"], state["model.text.wte"])
    assert not torch.equal(random_state_dict(TINY, seed=4)["model.text.wte"], state["model.text.wte"])


def test_config_restored_from_config_json(tiny_ckpt):
    meta = json.loads((tiny_ckpt / "config.json").read_text())
    assert meta["model_type"] == "moondream1"
    assert meta["config"]["preset"] == "tiny"
    assert load_config(tiny_ckpt) == TINY
    assert expected_tensors(load_config(tiny_ckpt)) == expected_tensors(TINY)


def test_official_config_json_selects_the_moondream2_preset(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "moondream1", "architectures": ["HfMoondream"], "torch_dtype": "bfloat16", "config": {}}))
    config = load_config(tmp_path)
    assert config == MOONDREAM2
    assert expected_tensors(config) == documented_keys()


def test_missing_config_json_means_moondream2(tmp_path):
    assert load_config(tmp_path) == MOONDREAM2


def test_config_json_overrides_a_preset(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"config": {"preset": "tiny", "text": {"n_layers": 1}}}))
    config = load_config(tmp_path)
    assert config.text.n_layers == 1 and config.text.dim == TINY.text.dim and config.vision == TINY.vision
    keys = expected_tensors(config)
    assert "model.text.blocks.0.ln.weight" in keys and "model.text.blocks.1.ln.weight" not in keys


def test_save_checkpoint_writes_official_config_for_moondream2(tmp_path, tokenizer):
    # The real shapes are not allocated: an empty state is enough to check the metadata file.
    save_checkpoint(tmp_path, {}, MOONDREAM2, tokenizer.to_str())
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["config"] == {} and meta["model_type"] == "moondream1"
    assert (tmp_path / "tokenizer.json").read_text() == tokenizer.to_str()
    assert load_config(tmp_path) == MOONDREAM2


def test_load_model_with_explicit_config_ignores_config_json(tmp_path, tiny_ckpt):
    shutil.copy(tiny_ckpt / "model.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text("not json at all")
    assert load_model(tmp_path, config=TINY).config == TINY


def test_unknown_dtype_is_rejected(tiny_ckpt):
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        load_model(tiny_ckpt, dtype="int8")


# ---------------------------------------------------------------------------------------------
# Bad checkpoints
# ---------------------------------------------------------------------------------------------

class _Allocated(BaseException):
    """Raised (past every `except Exception`) if the loader allocates or reads before validating."""


@pytest.fixture
def forbid_loading(monkeypatch):
    """Fail the test if a real (non-meta) model is built or tensor data is read."""
    real = ckpt.MoondreamModel

    def meta_only(config, *, device=None, dtype=None):
        if str(device) != "meta":
            raise _Allocated(f"a model was allocated on {device!r} before the checkpoint was validated")
        return real(config, device=device, dtype=dtype)

    def no_read(*args, **kwargs):
        raise _Allocated("tensor data was read before the checkpoint was validated")

    monkeypatch.setattr(ckpt, "MoondreamModel", meta_only)
    monkeypatch.setattr(ckpt, "safe_open", no_read)


def writable_copy(tiny_ckpt: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, target)
    return target


def write_state(tmp_path: Path, state: dict[str, torch.Tensor], tokenizer) -> Path:
    return write_tiny_checkpoint(tmp_path / "ckpt", state, tokenizer)


def write_raw(path: Path, header: bytes, data: bytes = b"", declared: int | None = None) -> None:
    path.write_bytes(struct.pack("<Q", len(header) if declared is None else declared) + header + data)


def test_missing_directory(tmp_path, forbid_loading):
    with pytest.raises(CheckpointError, match=r"nowhere: not a checkpoint directory"):
        load_model(tmp_path / "nowhere")


def test_directory_is_a_file(tmp_path, forbid_loading):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load_model(tmp_path / "file")


def test_missing_weights_file(tmp_path, tiny_ckpt, forbid_loading):
    d = writable_copy(tiny_ckpt, tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no model\.safetensors"):
        load_model(d)


def test_missing_key(tmp_path, tiny_state, tokenizer, forbid_loading):
    state = {k: v for k, v in tiny_state.items() if k not in ("model.text.wte", "model.region.size_features")}
    with pytest.raises(CheckpointError, match=r"2 missing keys: model\.region\.size_features, model\.text\.wte") as e:
        load_model(write_state(tmp_path, state, tokenizer))
    assert "unexpected" not in str(e.value)


def test_unexpected_key(tmp_path, tiny_state, tokenizer, forbid_loading):
    state = {**tiny_state, "model.text.blocks.2.ln.weight": torch.ones(TINY.text.dim)}
    with pytest.raises(CheckpointError, match=r"1 unexpected keys: model\.text\.blocks\.2\.ln\.weight") as e:
        load_model(write_state(tmp_path, state, tokenizer))
    assert "missing" not in str(e.value)


def test_unprefixed_keys_are_reported(tmp_path, tiny_state, tokenizer, forbid_loading):
    # A state dict saved without the `model.` prefix: every key is both missing and unexpected.
    state = {k[len("model."):]: v for k, v in tiny_state.items()}
    n = len(tiny_state)
    with pytest.raises(CheckpointError, match=rf"{n} missing keys: .*{n} unexpected keys: "):
        load_model(write_state(tmp_path, state, tokenizer))


def test_wrong_shape(tmp_path, tiny_state, tokenizer, forbid_loading):
    state = {**tiny_state, "model.text.post_ln.weight": torch.ones(TINY.text.dim + 1)}
    with pytest.raises(CheckpointError, match=r"model\.text\.post_ln\.weight: shape \[65\], expected \[64\]"):
        load_model(write_state(tmp_path, state, tokenizer))


def test_legacy_transposed_coord_features(tmp_path, tiny_state, tokenizer, forbid_loading):
    # §8.6: legacy files store [n, 1]; the current layout is [1, n].
    state = {**tiny_state, "model.region.coord_features": tiny_state["model.region.coord_features"].T.contiguous()}
    with pytest.raises(CheckpointError, match=r"model\.region\.coord_features: shape \[16, 1\], expected \[1, 16\]"):
        load_model(write_state(tmp_path, state, tokenizer))


@pytest.mark.parametrize("dtype,name", [(torch.int64, "I64"), (torch.int32, "I32"), (torch.uint8, "U8"),
                                        (torch.bool, "BOOL")])
def test_non_float_dtype(tmp_path, tiny_state, tokenizer, forbid_loading, dtype, name):
    state = {**tiny_state, "model.text.post_ln.bias": torch.zeros(TINY.text.dim, dtype=dtype)}
    with pytest.raises(CheckpointError, match=rf"model\.text\.post_ln\.bias: dtype {name}, expected a floating-point"):
        load_model(write_state(tmp_path, state, tokenizer))


def test_every_problem_is_listed_at_once(tmp_path, tiny_state, tokenizer, forbid_loading):
    state = dict(tiny_state)
    del state["model.text.wte"]
    state["model.extra"] = torch.zeros(1)
    state["model.text.lm_head.bias"] = torch.zeros(3)
    with pytest.raises(CheckpointError) as e:
        load_model(write_state(tmp_path, state, tokenizer))
    message = str(e.value)
    for part in ("missing keys: model.text.wte", "unexpected keys: model.extra",
                 "model.text.lm_head.bias: shape [3], expected [512]"):
        assert part in message


@pytest.mark.parametrize("where", ["empty", "3 bytes", "length only", "mid header", "header only",
                                   "mid data", "last byte missing"])
def test_truncated_file(tmp_path, tiny_ckpt, forbid_loading, where):
    d = writable_copy(tiny_ckpt, tmp_path)
    path = d / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    cut = {"empty": 0, "3 bytes": 3, "length only": 8, "mid header": 8 + n // 2, "header only": 8 + n,
           "mid data": (8 + n + len(data)) // 2, "last byte missing": len(data) - 1}[where]
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: .*truncated"):
        load_model(d)


def test_truncated_file_header_is_rejected_by_read_header(tmp_path, tiny_ckpt):
    data = (tiny_ckpt / "model.safetensors").read_bytes()
    path = tmp_path / "model.safetensors"
    path.write_bytes(data[:-1])
    with pytest.raises(CheckpointError, match=r"data range \d+\.\.\d+ does not fit the file"):
        read_header(path)
    path.write_bytes(data)
    assert {k: v.shape for k, v in read_header(path).items()} == expected_tensors(TINY)


def test_header_length_larger_than_file(tmp_path, tiny_ckpt, forbid_loading):
    d = writable_copy(tiny_ckpt, tmp_path)
    write_raw(d / "model.safetensors", b'{"a": 1}', b"x" * 100, declared=5000)
    with pytest.raises(CheckpointError, match=r"header length 5000 is larger than the file \(116 bytes\)"):
        load_model(d)


@pytest.mark.parametrize("declared", [2**64 - 1, 2**63, 10**15])
def test_absurd_header_length(tmp_path, tiny_ckpt, forbid_loading, declared):
    d = writable_copy(tiny_ckpt, tmp_path)
    write_raw(d / "model.safetensors", b"{}", declared=declared)
    with pytest.raises(CheckpointError, match=rf"header length {declared} .*corrupt"):
        load_model(d)


def test_header_length_over_the_cap(tmp_path, tiny_ckpt, forbid_loading, monkeypatch):
    # A header that fits the file but exceeds MAX_HEADER_BYTES is refused without being read.
    d = writable_copy(tiny_ckpt, tmp_path)
    monkeypatch.setattr(ckpt, "MAX_HEADER_BYTES", 64)
    with pytest.raises(CheckpointError, match=r"header length \d+ .*absurd"):
        load_model(d)


@pytest.mark.parametrize("header", [b"{not json" + b" " * 7, b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"text"', b"null"],
                         ids=["syntax", "binary", "list", "string", "null"])
def test_garbage_header_json(tmp_path, tiny_ckpt, forbid_loading, header):
    d = writable_copy(tiny_ckpt, tmp_path)
    write_raw(d / "model.safetensors", header, b"\0" * 64)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: header is not valid JSON"):
        load_model(d)


@pytest.mark.parametrize("entry", [{"dtype": "F32", "shape": [2]}, {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]},
                                   {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}, "nonsense"],
                         ids=["no offsets", "unknown dtype", "shape not a list", "not an object"])
def test_malformed_header_entry(tmp_path, tiny_ckpt, forbid_loading, entry):
    d = writable_copy(tiny_ckpt, tmp_path)
    write_raw(d / "model.safetensors", json.dumps({"model.text.wte": entry}).encode(), b"\0" * 8)
    with pytest.raises(CheckpointError, match=r"model\.text\.wte: malformed header entry"):
        load_model(d)


def test_header_offsets_disagree_with_shape(tmp_path, tiny_ckpt, forbid_loading):
    d = writable_copy(tiny_ckpt, tmp_path)
    header = {"model.text.wte": {"dtype": "F32", "shape": [512, 64], "data_offsets": [0, 8]}}
    write_raw(d / "model.safetensors", json.dumps(header).encode(), b"\0" * 8)
    with pytest.raises(CheckpointError, match=r"model\.text\.wte: data range 0\.\.8 does not fit"):
        load_model(d)


def test_corrupt_payload_is_a_checkpoint_error(tmp_path, tiny_ckpt):
    # Header and sizes valid, but two tensors claim the same bytes: safetensors refuses the file.
    d = writable_copy(tiny_ckpt, tmp_path)
    path = d / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    a, b = "model.text.post_ln.weight", "model.text.post_ln.bias"
    header[b]["data_offsets"] = header[a]["data_offsets"]
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (n - len(raw)) if len(raw) <= n else b""
    assert len(raw) == n
    path.write_bytes(data[:8] + raw + data[8 + n:])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot read tensors \(.*post_ln\.(weight|bias)"):
        load_model(d)


# ---- config.json ---------------------------------------------------------------------------

def with_config_json(tiny_ckpt: Path, tmp_path: Path, content: str | bytes) -> Path:
    d = writable_copy(tiny_ckpt, tmp_path)
    path = d / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return d


@pytest.mark.parametrize("content,message", [
    ("{not json", r"config\.json: not a readable JSON file"),
    (b"\xff\xfe{}", r"config\.json: not a readable JSON file"),
    ("", r"config\.json: not a readable JSON file"),
    ("[1, 2]", r"config\.json: expected a JSON object"),
    ('{"config": [1]}', r'config\.json: "config" must be an object'),
    ('{"config": {"preset": "huge"}}', r"config\.json: unknown preset 'huge'"),
], ids=["syntax", "binary", "empty", "list", "config list", "unknown preset"])
def test_config_json_unreadable(tmp_path, tiny_ckpt, forbid_loading, content, message):
    d = with_config_json(tiny_ckpt, tmp_path, content)
    with pytest.raises(CheckpointError, match=message):
        load_model(d)


def tiny_overrides(**sections) -> str:
    return json.dumps({"model_type": "moondream1", "config": {"preset": "tiny", **sections}})


@pytest.mark.parametrize("sections,message", [
    ({"text": {"bogus": 1, "also_bogus": 2}}, r"section 'text' has unknown keys: also_bogus, bogus"),
    ({"audio": {"dim": 3}}, r"unknown sections: audio"),
    ({"text": []}, r"section 'text' must be an object"),
    ({"text": {"dim": "64"}}, r"text\.dim must be int, got '64'"),
    ({"text": {"dim": 64.0}}, r"text\.dim must be int"),
    ({"text": {"n_layers": True}}, r"text\.n_layers must be int"),
    ({"text": {"rope_theta": "big"}}, r"text\.rope_theta must be a number"),
    ({"tokens": {"detect_prefix": [1, "x"]}}, r"tokens\.detect_prefix must be a list of ints"),
], ids=["unknown keys", "unknown section", "section not object", "str dim", "float dim", "bool layers",
        "str theta", "bad template"])
def test_config_json_unknown_or_mistyped_keys(tmp_path, tiny_ckpt, forbid_loading, sections, message):
    d = with_config_json(tiny_ckpt, tmp_path, tiny_overrides(**sections))
    with pytest.raises(CheckpointError, match=message):
        load_model(d)


@pytest.mark.parametrize("sections,message", [
    ({"text": {"dim": -64}}, r"text\.dim must be positive \(got -64\)"),
    ({"vision": {"n_layers": 0}}, r"vision\.n_layers must be positive"),
    ({"text": {"n_heads": 0}}, r"text\.n_heads must be positive"),
    ({"text": {"n_heads": 5}}, r"text\.dim 64 is not divisible by text\.n_heads 5"),
    ({"vision": {"n_heads": 7}}, r"vision\.dim 64 is not divisible by vision\.n_heads 7"),
    ({"text": {"vocab_size": 10**12}}, r"text\.vocab_size = 1000000000000 exceeds the limit"),
    ({"text": {"dim": 2**40, "n_heads": 1}}, r"text\.dim = 1099511627776 exceeds the limit"),
    ({"vision": {"n_layers": 10**6}}, r"vision\.n_layers = 1000000 exceeds the limit"),
    ({"text": {"rotary_dims": 7}}, r"text\.rotary_dims 7 must be even"),
    ({"text": {"rotary_dims": 32}}, r"text\.rotary_dims 32 must be even and within the head dim 16"),
    ({"vision": {"patch_size": 10}}, r"vision\.crop_size 112 is not a multiple of vision\.patch_size 10"),
    ({"vision": {"overlap_margin": 7}}, r"vision\.overlap_margin 7 leaves no tile interior"),
    ({"text": {"max_context": 200}}, r"text\.max_context 200 leaves no room after the 197-token image prefix"),
    ({"region": {"size_feat_dim": 6}}, r"region feature dims"),
    ({"tokens": {"coord_id": 9999}}, r"token ids \[9999\] lie outside the vocabulary of 512"),
    ({"tokens": {"eos_id": -1}}, r"token ids \[-1\] lie outside"),
], ids=["negative dim", "zero layers", "zero heads", "text heads", "vision heads", "huge vocab", "huge dim",
        "huge layers", "odd rotary", "rotary > head", "patch", "margin", "context", "size feats", "coord id",
        "negative id"])
def test_config_json_nonsense_dims_fail_before_allocation(tmp_path, tiny_ckpt, forbid_loading, sections, message):
    d = with_config_json(tiny_ckpt, tmp_path, tiny_overrides(**sections))
    with pytest.raises(CheckpointError, match=r"config\.json: invalid model config: .*" + message):
        load_model(d)


@pytest.mark.parametrize("sections", [{"vision": {"in_channels": -3}}, {"vision": {"in_channels": 4}},
                                      {"text": {"rope_theta": 0}}, {"text": {"rope_theta": -1.0}}],
                         ids=["negative channels", "4 channels", "zero theta", "negative theta"])
def test_config_json_unchecked_dims_are_rejected(tmp_path, tiny_ckpt, sections):
    # in_channels must be 3 (images are RGB); rope_theta must be a positive finite number.
    d = with_config_json(tiny_ckpt, tmp_path, tiny_overrides(**sections))
    with pytest.raises(CheckpointError, match="invalid model config"):
        load_model(d)


def test_config_from_dict_rejects_nonsense_directly():
    with pytest.raises(ValueError, match="invalid model config"):
        MoondreamConfig.from_dict({"text": {"n_heads": 5}}, base=TINY)
    with pytest.raises(ValueError, match="invalid model config"):
        ckpt.MoondreamModel(MoondreamConfig(text=TINY.text.__class__(dim=64, n_heads=5)), device="meta")


# ---- non-finite weights --------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_warn(tmp_path, tiny_state, tokenizer, value):
    wte = tiny_state["model.text.wte"].clone()
    wte[7, 3] = value
    d = write_state(tmp_path, {**tiny_state, "model.text.wte": wte}, tokenizer)
    with pytest.warns(UserWarning, match=r"1 tensors contain NaN/Inf: model\.text\.wte"):
        model = load_model(d)
    loaded = model.text.wte[7, 3].item()
    assert (math.isnan(loaded) and math.isnan(value)) or loaded == value


def test_finite_weights_do_not_warn(tiny_ckpt, recwarn):
    load_model(tiny_ckpt)
    assert not [w for w in recwarn if "NaN" in str(w.message)]

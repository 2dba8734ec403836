"""The digit world's integrity: checksums of its weights, a run's base-model fingerprint in `load_policy`, and
world.json fields checked (types, required keys, bounds) before anything is built.

Every test works on a temporary copy of data/digit_base or on a tiny world saved to tmp_path; the committed folder is
only read.
"""

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from recast.config import preset
from recast.experiments.judge_eval import load_policy
from recast.trainer import train
from recast.trainer.checkpoint import load_checkpoint, save_checkpoint
from recast.worlds.digits import model
from recast.worlds.digits.model import (PRESETS, WEIGHT_FILES, approx_parameters, build_world, load_world,
                                        save_world, tiny_world)

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "data" / "digit_base"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _state(world) -> dict[str, torch.Tensor]:
    return {**{f"transformer.{k}": v for k, v in world.transformer.state_dict().items()},
            **{f"text_encoder.{k}": v for k, v in world.text_encoder.state_dict().items()}}


def _assert_same_weights(a, b) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture
def base_copy(tmp_path) -> Path:
    """A copy of the committed base world (tests alter the copy, never the committed folder)."""
    return Path(shutil.copytree(BASE, tmp_path / "digit_base"))


@pytest.fixture
def no_build(monkeypatch):
    """Fail the test if either network is built: the checks must refuse before any tensor is allocated (and an
    unchecked 100,000-wide text tower would exhaust the machine's memory)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a network was built before the check refused")

    monkeypatch.setattr(model, "SD3Transformer2DModel", refuse)
    monkeypatch.setattr(model, "build_text_encoder", refuse)


def _edit(folder: Path, change) -> Path:
    """Apply `change(meta)`, which mutates the parsed world.json in place, to the folder's world.json."""
    meta = json.loads((folder / "world.json").read_text())
    change(meta)
    (folder / "world.json").write_text(json.dumps(meta))
    return folder / "world.json"


def _corrupt(path: Path, seed: int = 0) -> None:
    """Overwrite 4 KB of the tensor data with random finite float32 values: the header and size stay valid, so only a
    checksum can tell."""
    data = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little") + 1024
    noise = np.random.default_rng(seed).standard_normal(1024).astype(np.float32).tobytes()
    data[start:start + len(noise)] = noise
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------------------------------ 1. checksums
def test_the_committed_world_records_the_checksums_of_its_weights():
    meta = json.loads((BASE / "world.json").read_text())
    assert meta["checksums"] == {name: _sha256(BASE / name) for name in WEIGHT_FILES}


def test_save_world_records_checksums_and_a_resave_of_the_committed_world_is_byte_identical(tmp_path):
    save_world(load_world(BASE), tmp_path / "w")
    for name in ("world.json", *WEIGHT_FILES):
        assert (tmp_path / "w" / name).read_bytes() == (BASE / name).read_bytes(), name


@pytest.mark.parametrize("name", WEIGHT_FILES)
def test_corrupted_weights_are_refused_before_building(base_copy, name, no_build):
    _corrupt(base_copy / name)
    with pytest.raises(ValueError, match=rf"{re.escape(str(base_copy / name))}: sha256 [0-9a-f]{{12}} is not the "
                                         r"[0-9a-f]{12} world.json records .*git checkout -- data/digit_base"):
        load_world(base_copy)


def test_a_tiny_world_s_checksums_catch_a_changed_weight(tmp_path):
    world = tiny_world(0)
    save_world(world, tmp_path / "w")
    _assert_same_weights(world, load_world(tmp_path / "w"))
    _corrupt(tmp_path / "w" / "text_encoder.safetensors")
    with pytest.raises(ValueError, match="text_encoder.safetensors: sha256"):
        load_world(tmp_path / "w")


def test_the_trainer_refuses_a_corrupted_world(tmp_path):
    save_world(tiny_world(0), tmp_path / "w")
    _corrupt(tmp_path / "w" / "transformer.safetensors")
    with pytest.raises(ValueError, match="cannot load the world .*transformer.safetensors: sha256"):
        train(preset("ci", iterations=1, world=f"digits:{tmp_path / 'w'}"), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_world_saved_before_checksums_still_loads(base_copy):
    _edit(base_copy, lambda meta: meta.pop("checksums"))
    _assert_same_weights(load_world(BASE), load_world(base_copy))


@pytest.mark.parametrize("checksums, match", [
    ({"transformer.safetensors": "0" * 64}, r"field 'checksums' must name exactly"),
    ({"transformer.safetensors": "0" * 64, "text_encoder.safetensors": "0" * 64, "x.bin": "0" * 64},
     r"field 'checksums' must name exactly"),
    ({"transformer.safetensors": "XYZ", "text_encoder.safetensors": "0" * 64},
     r"field 'checksums.transformer.safetensors' must be a sha256"),
])
def test_malformed_checksums_are_refused(base_copy, checksums, match):
    file = _edit(base_copy, lambda meta: meta.update(checksums=checksums))
    with pytest.raises(ValueError, match=rf"{re.escape(str(file))}: {match}"):
        load_world(base_copy)


# ------------------------------------------------------------------------------------------ 2. load_policy
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A one-iteration ci run on a tiny world saved as a folder: (world folder, run folder)."""
    root = tmp_path_factory.mktemp("fingerprint")
    world = save_world(tiny_world(0), root / "world")
    train(preset("ci", iterations=1, eval_prompts=2, world=f"digits:{world}"), root / "run")
    return world, root / "run"


@pytest.fixture
def run_copy(tiny_run, tmp_path):
    """A copy of the tiny run and its world; the run's config.json points at the copied world."""
    world = Path(shutil.copytree(tiny_run[0], tmp_path / "world"))
    run = Path(shutil.copytree(tiny_run[1], tmp_path / "run"))
    cfg = json.loads((run / "config.json").read_text())
    cfg["world"] = f"digits:{world}"
    (run / "config.json").write_text(json.dumps(cfg))
    return world, run


def _change_base(world_dir: Path) -> None:
    """Change one base weight slightly and re-save the world (valid checksums: a deliberate change)."""
    world = load_world(world_dir)
    with torch.no_grad():
        next(iter(world.transformer.parameters())).add_(1e-3)
    save_world(world, world_dir)


def test_load_policy_computes_the_fingerprint_as_the_trainer_does(run_copy):
    _, run = run_copy
    recorded = json.loads((run / "config.json").read_text())["_run"]["world_fingerprint"]
    assert recorded and load_checkpoint(run)["world_fingerprint"] == recorded
    for which in ("ema", "params", "base"):
        assert load_policy(run, which=which).which == which  # the unchanged base passes the check


@pytest.mark.parametrize("which", ["ema", "params", "base"])
def test_load_policy_refuses_a_changed_base_model(run_copy, which):
    world, run = run_copy
    recorded = json.loads((run / "config.json").read_text())["_run"]["world_fingerprint"]
    _change_base(world)
    with pytest.raises(ValueError, match=rf"cannot load {re.escape(str(run))}: the base model's weights differ .*"
                                         rf"fingerprint {recorded[:12]} in its config.json vs [0-9a-f]{{12}} of"):
        load_policy(run, which=which)


def test_load_policy_checks_the_checkpoint_s_fingerprint_too(run_copy):
    world, run = run_copy
    cfg = json.loads((run / "config.json").read_text())
    recorded = cfg["_run"].pop("world_fingerprint")
    (run / "config.json").write_text(json.dumps(cfg))
    load_policy(run)
    _change_base(world)
    with pytest.raises(ValueError, match=rf"fingerprint {recorded[:12]} in its checkpoint.pt vs"):
        load_policy(run)


def test_a_run_without_recorded_fingerprints_still_loads(run_copy):
    world, run = run_copy
    cfg = json.loads((run / "config.json").read_text())
    del cfg["_run"]["world_fingerprint"]
    (run / "config.json").write_text(json.dumps(cfg))
    state = load_checkpoint(run)
    del state["world_fingerprint"]
    save_checkpoint(run, state)
    _change_base(world)
    assert load_policy(run).which == "ema"


# ------------------------------------------------------------------------------------------ 3. field types
def _set(*keys_value):
    *keys, value = keys_value

    def change(meta):
        d = meta
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return change


def _drop(*keys):
    def change(meta):
        d = meta
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return change


@pytest.mark.parametrize("change, match", [
    (_set("world", "num_layers", "abc"), "field 'world.num_layers' must be an int, got 'abc'"),
    (_set("world", "num_layers", 4.0), "field 'world.num_layers' must be an int, got 4.0"),
    (_set("world", "num_layers", True), "field 'world.num_layers' must be an int, got True"),
    (_set("world", "text", "max_length", "12"), "field 'world.text.max_length' must be an int, got '12'"),
    (_set("world", "text", [1, 2]), "field 'world.text' must be a dict, got \\[1, 2\\]"),
    (_set("world", None), "field 'world' must be a dict, got None"),
    (_set("vocab", "a at the"), "field 'vocab' must be a list, got 'a at the'"),
    (_set("vocab", [1, 2]), "field 'vocab' must be a list of strings"),
    (_set("palette", 3), "field 'palette' must be a str, got 3"),
    (_set("format", 2), "field 'format' must be 1, got 2"),
    (_set("checksums", "abc"), "field 'checksums' must be a dict, got 'abc'"),
    (_drop("vocab"), "required field 'vocab' is missing"),
    (_drop("format"), "required field 'format' is missing"),
    (_drop("world", "text"), "required field 'world.text' is missing"),
    (_drop("world", "text", "num_heads"), "required field 'world.text.num_heads' is missing"),
    (_set("world", "num_layer", 4), "unknown field 'world.num_layer'"),
    (_set("pallete", "primary"), "unknown field 'pallete'"),
])
def test_world_json_field_errors_name_the_file_and_the_field(base_copy, no_build, change, match):
    file = _edit(base_copy, change)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(file))}: {match}"):
        load_world(base_copy)


def test_a_world_json_that_is_not_an_object_is_refused(base_copy, no_build):
    file = base_copy / "world.json"
    file.write_text(json.dumps([json.loads(file.read_text())]))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(file))}: must hold a JSON object, got list"):
        load_world(base_copy)


# ------------------------------------------------------------------------------------------ 4. bounds
@pytest.mark.parametrize("change, match", [
    (_set("world", "num_layers", 100000), "field 'world.num_layers' must be between 1 and 64, got 100000"),
    (_set("world", "num_layers", 0), "field 'world.num_layers' must be between 1 and 64, got 0"),
    (_set("world", "num_attention_heads", -4), "field 'world.num_attention_heads' must be between 1 and 64"),
    (_set("world", "attention_head_dim", 10**9), "field 'world.attention_head_dim' must be between 1 and 512"),
    (_set("world", "patch_size", 48), "field 'world.patch_size' must be between 1 and 24"),
    (_set("world", "patch_size", 5), "field 'world.patch_size' must divide the 24-pixel canvas, got 5"),
    (_set("world", "text", "hidden_size", 100000), "field 'world.text.hidden_size' must be between 1 and 4096"),
    (_set("world", "text", "intermediate_size", 10**6),
     "field 'world.text.intermediate_size' must be between 1 and 16384"),
    (_set("world", "text", "max_length", 1), "field 'world.text.max_length' must be between 2 and 512, got 1"),
    (_set("world", "text", "num_heads", 5),
     "field 'world.text.hidden_size' \\(64\\) must be a multiple of 'world.text.num_heads' \\(5\\)"),
    (lambda meta: meta["world"].update(num_attention_heads=64, attention_head_dim=512),
     "fields 'world.num_attention_heads' x 'world.attention_head_dim' = 32768, above the bound of 4096"),
    (lambda meta: meta["world"].update(num_layers=64, num_attention_heads=32, attention_head_dim=128),
     "field 'world' describes about [0-9,]+ parameters, above the bound of 1,000,000,000"),
])
def test_architecture_bounds_are_checked_before_building(base_copy, no_build, change, match):
    file = _edit(base_copy, change)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^{re.escape(str(file))}: {match}"):
        load_world(base_copy)
    assert time.perf_counter() - start < 2  # refused from world.json alone, before any weights or modules


def test_the_bounds_admit_every_preset_and_the_parameter_estimate_is_close():
    from recast.worlds.digits.text import TextEncoderConfig

    wide = model.WorldConfig(num_layers=8, num_attention_heads=8, attention_head_dim=32, patch_size=1,
                             text=TextEncoderConfig(hidden_size=128, projection_dim=64, num_layers=2, num_heads=4,
                                                    intermediate_size=256))
    for config in (*PRESETS.values(), wide):
        world = build_world(config)
        real = sum(p.numel() for m in (world.transformer, world.text_encoder) for p in m.parameters())
        assert real <= approx_parameters(config) <= 1.35 * real  # never under: it bounds memory
        assert approx_parameters(config) < model.MAX_PARAMETERS / 10

"""The paper's settings and configs/paper/*.yaml, offline: the staged reward settings and their held-out judges, each
config at the ReCAST release's recipe (RECAST.md §0), validated by the trainer without loading anything, the batch
plan on 8 GPUs, the sweep's budget names, and (slow) one config with configs/smoke.yaml layered in, trained end to end
on the tiny SD3 pipeline with tiny models for every reward and judge, UnifiedReward-2 behind a stub endpoint."""

import json
from pathlib import Path

import pytest

import numpy as np

from recast.archives import DensityProfile, save_profile
from recast.config import preset
from recast.configfile import layered_config, sweep_section
from recast.experiments.paper_eval import paper_budgets
from recast.worlds.sd3 import rewards
from recast.worlds.sd3.settings import PAPER_JUDGES, resolve_settings

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"stage1": ("stage1", 121), "stage2_ocr": ("stage_ocr", 61), "stage2_geneval": ("stage_geneval", 61)}


def _profile(path: Path, num_steps: int) -> str:
    """A synthetic density-ratio profile of every reward of the paper's settings on the release's grid (shift 3), in
    place of the one `recast profile` makes from SD3.5-Medium's proposals (what the configs name)."""
    from recast.sampling import sigma_schedule

    rng = np.random.default_rng(0)
    names = sorted({n for s in ("stage1", "stage_ocr", "stage_geneval") for n in rewards.SETTINGS[s]})
    ratios = {n: rng.gamma(2.0, 0.5, size=(16, num_steps)) for n in names}
    save_profile(DensityProfile(sigma_schedule(num_steps, 3.0).double().numpy(), ratios, {"proposal": "synthetic"}),
                 path)
    return str(path)


def test_staged_settings_and_their_judges():
    assert rewards.SETTINGS["stage1"] == ("clipscore", "hpsv2", "pickscore")
    assert rewards.SETTINGS["stage_ocr"] == ("clipscore", "hpsv2", "pickscore", "ocr")
    assert rewards.SETTINGS["stage_geneval"] == ("clipscore", "hpsv2", "pickscore", "geneval")
    assert PAPER_JUDGES == ("imagereward", "aesthetic", "hpsv3", "unifiedreward")
    for setting in ("stage1", "stage_ocr", "stage_geneval"):
        settings, _ = resolve_settings("x", setting, {})
        assert settings.judges == PAPER_JUDGES
        assert not set(settings.judges) & set(rewards.SETTINGS[setting])  # held out: never trained
    assert all(rewards.get(name) for name in PAPER_JUDGES)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_config_holds_the_release_recipe_and_validates_offline(name, tmp_path):
    from recast.distributed import process_plan
    from recast.trainer.validate import validate

    setting, epochs = CONFIGS[name]
    path = f"configs/paper/{name}.yaml"
    cfg = layered_config(None, path)
    got = {k: getattr(cfg, k) for k in (
        "setting", "method", "iterations", "prompts_per_iter", "group_size", "num_steps", "shift", "train_columns",
        "grad_accum", "std_scope", "adv_clip_max", "nft_beta", "nft_norm", "nft_loss_scale", "kl_beta",
        "old_decay_rate", "old_decay_max", "ema_decay", "lora_rank", "lora_alpha", "lr", "weight_decay", "adam_betas",
        "adam_eps", "grad_clip", "mixed_precision", "checkpoint_every")}
    assert got == dict(setting=setting, method="recast", iterations=epochs, prompts_per_iter=6, group_size=24,
                       num_steps=25, shift=3.0, train_columns=24, grad_accum=6, std_scope="group", adv_clip_max=5.0,
                       nft_beta=0.1, nft_norm="x0", nft_loss_scale=True, kl_beta=1e-4, old_decay_rate=0.001,
                       old_decay_max=0.5, ema_decay=0.0, lora_rank=32, lora_alpha=64.0, lr=3e-4, weight_decay=1e-4,
                       adam_betas=(0.9, 0.999), adam_eps=1e-8, grad_clip=1.0, mixed_precision="bf16",
                       checkpoint_every=30)
    ws = cfg.world_settings
    assert (ws["num_steps"], ws["max_sequence_length"], ws["resolution"], ws["guidance_scale"],
            ws["gradient_checkpointing"], tuple(ws["judges"])) == (25, 128, 512, 1.0, True, PAPER_JUDGES)
    plan = process_plan(cfg, 8)  # 48 prompt groups, 1,152 images an epoch; ~24 samples per forward per column
    assert (plan.prompts_per_gpu, plan.images_per_gpu, plan.global_images) == (6, 144, 1152)
    assert round(cfg.B * cfg.train_columns / cfg.num_steps / cfg.grad_accum) == 23
    assert cfg.weight_file == "profiles/sd35_T25.npz"  # the profile the docs' first command writes
    sets = {"device": "cpu", "world": "sd3:stabilityai/stable-diffusion-3.5-medium"}
    with pytest.raises(FileNotFoundError, match="weight_file: profiles/sd35_T25.npz: no such file"):
        validate(layered_config(None, path, sets=sets), tmp_path)  # before it is made: refused before any load
    sets["weight_file"] = _profile(tmp_path / "p.npz", 25)
    spec = validate(layered_config(None, path, sets=sets), tmp_path / "run")
    assert spec.reward_names == rewards.SETTINGS[setting]
    assert spec.lam.tolist() == pytest.approx([1 / len(spec.reward_names)] * len(spec.reward_names))
    sweep = sweep_section(path)
    budgets = paper_budgets(rewards.SETTINGS[setting])
    assert set(sweep["budgets"]) <= set(budgets) and sweep["seeds"] == [0, 1, 2]
    assert len(sweep["budgets"]) == (5 if epochs == 61 else 1)  # stage 2: the five budgets x 3 seeds = 15 pairs
    assert layered_config(None, f"{path},configs/smoke.yaml").device == "cpu"  # the smoke layer shrinks it


def test_the_sd35_preset_is_the_release_grid_and_needs_a_profile():
    p = preset("sd35")
    assert (p.num_steps, p.shift, p.setting, p.method, p.weight_file) == (25, 3.0, "composition", "recast", "")


@pytest.mark.slow
def test_a_paper_config_trains_on_the_tiny_pipeline_with_every_reward_and_judge(tmp_path, monkeypatch):
    from test_vlm_judge import _Endpoint, reply

    from recast.cli import main
    from recast.worlds.sd3.tiny import save_tiny_pipeline, save_tiny_rewards

    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    ep = _Endpoint()
    try:
        ep.script = [reply("Alignment Score (1-5): 4\nCoherence Score (1-5): 3\nStyle Score (1-5): 2")] * 100
        pipe, root = save_tiny_pipeline(tmp_path / "sd35"), save_tiny_rewards(tmp_path / "reward_ckpts")  # hpsv3 too
        (root / "unifiedreward").mkdir()
        (root / "unifiedreward" / "endpoint.json").write_text(json.dumps({"endpoint": ep.url, "model": "ur2"}))
        out = tmp_path / "run"
        assert main(["train", "--config", "configs/paper/stage2_geneval.yaml,configs/smoke.yaml", "--world",
                     f"sd3:{pipe}", "--set", f"world_settings.reward_root={root}", "--set",
                     f"weight_file={_profile(tmp_path / 'p.npz', 3)}", "--out", str(out)]) == 0
        last = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()][-1]
        assert {f"judge/{j}" for j in PAPER_JUDGES} <= set(last)
        assert last["judge/unifiedreward"] == pytest.approx(3.0) and len(ep.requests) > 0
    finally:
        ep.stop.set()
        ep.shutdown()
        ep.server_close()

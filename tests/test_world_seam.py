"""The world seam: no generic module imports a world package, specs resolve once without loading weights, the SD3
world runs through the trainer (both backends), the sd35 preset validates, and the digit world's numbers are those
of the code before the seam."""

import ast
import json
from pathlib import Path

import pytest
import torch

from recast.config import preset, resolve_rewards, resolve_world
from recast.trainer import Trainer, train

ROOT = Path(__file__).resolve().parents[1]


def _imports(tree: ast.AST) -> set[str]:
    """Every module an AST imports (absolute names; `from recast.worlds import digits` counts as recast.worlds.digits)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _offenders(imports: set[str], package: str) -> list[str]:
    return sorted(m for m in imports if m == package or m.startswith(package + "."))


# package -> the files and folders (relative to the repo root) that may import it
OWNERS = {"recast.worlds.digits": ("recast/worlds/digits/",),
          "recast.worlds.sd3": ("recast/worlds/sd3/",)}


def test_no_module_outside_a_world_imports_it():
    bad = []
    for path in sorted((ROOT / "recast").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        imports = _imports(ast.parse(path.read_text()))
        for package, owners in OWNERS.items():
            if not rel.startswith(owners):
                bad += [f"{rel}: {m}" for m in _offenders(imports, package)]
    assert not bad, bad


def test_the_check_sees_every_import_form():
    tree = ast.parse("import recast.worlds.digits.data\nfrom recast.worlds import digits\nfrom recast.worlds.sd3 import lora\n"
                     "def f():\n    from recast.worlds.digits.rewards import get\n")
    found = _imports(tree)
    assert _offenders(found, "recast.worlds.digits") == ["recast.worlds.digits", "recast.worlds.digits.data",
                                                         "recast.worlds.digits.rewards",
                                                         "recast.worlds.digits.rewards.get"]
    assert _offenders(found, "recast.worlds.sd3") == ["recast.worlds.sd3", "recast.worlds.sd3.lora"]


@pytest.mark.parametrize("name", ["03_train", "04_w_heatmaps", "07_sd35_train"])
def test_generic_notebooks_import_no_world(name):
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    imports = _imports(ast.parse(code))
    assert imports and not [m for m in imports if m.startswith("recast.worlds")], imports


def test_world_values_resolve_to_specs(tmp_path):
    assert resolve_world("tiny") == "tiny" and resolve_world("sd3-tiny") == "sd3-tiny"
    assert resolve_world("data/digit_base") in ("digits:data/digit_base", f"digits:{ROOT / 'data' / 'digit_base'}")
    assert resolve_world("digits:data/digit_base").endswith("data/digit_base")
    with pytest.raises(FileNotFoundError, match="no digit world at .*prefixes: digits, tiny, sd3, sd3-tiny"):
        resolve_world(str(tmp_path / "none"))
    with pytest.raises(ValueError, match="unknown world spec 'nope:x'"):
        resolve_rewards(preset("ci", world="nope:x"))
    with pytest.raises(ValueError, match="unknown setting 'compose' for world 'sd3-tiny'.*composition"):
        resolve_rewards(preset("ci", world="sd3-tiny"))
    with pytest.raises(ValueError, match="unknown reward 'color' for world 'sd3-tiny'"):
        resolve_rewards(preset("ci", world="sd3-tiny", rewards=("color",)))


def test_sd35_preset_validates_without_loading_anything(tmp_path):
    from recast.cli import build_parser, config_from_args
    from recast.trainer.validate import validate

    import numpy as np

    from recast.archives import DensityProfile, save_profile
    from recast.sampling import sigma_schedule

    assert preset("sd35").device == "cuda"
    cfg = preset("sd35", device="cpu")  # validation refuses cuda on a machine without a GPU
    with pytest.raises(ValueError, match="needs a weight table.*recast profile --world sd3:.* --num-steps 25"):
        validate(cfg, tmp_path / "a")  # the paper's method needs a profile of this model; none is committed
    names = ("geneval", "ocr", "pickscore", "clipscore")
    rng = np.random.default_rng(0)
    save_profile(DensityProfile(sigma_schedule(25, 3.0).double().numpy(),
                                {n: rng.gamma(4.0, 0.25, size=(16, 25)) for n in names}), tmp_path / "p.npz")
    cfg = cfg.replace(weight_file=str(tmp_path / "p.npz"))
    spec = validate(cfg, tmp_path / "b")
    assert spec.reward_names == names and spec.lam.tolist() == [0.25] * 4
    assert spec.table.reward_names == names and spec.table.num_steps == 25  # solved for λ before anything loads
    assert spec.world == "sd3:stabilityai/stable-diffusion-3.5-medium"  # resolved once, trusted by the trainer
    assert (cfg.group_size, cfg.num_steps, cfg.train_columns, cfg.lora_rank, cfg.lora_alpha, cfg.lr, cfg.nft_beta,
            cfg.kl_beta, cfg.nft_norm, cfg.ema_decay, cfg.mixed_precision) == \
        (24, 25, 24, 32, 64.0, 3e-4, 0.1, 1e-4, "x0", 0.0, "bf16")
    args = build_parser().parse_args(["train", "--preset", "sd35", "--world", "sd3:/models/sd35", "--out", "x"])
    assert config_from_args(args).world == "sd3:/models/sd35"


def test_process_plan_of_the_sd35_preset_on_8_gpus():
    from recast.distributed import process_plan

    plan = process_plan(preset("sd35"), 8)
    assert (plan.prompts_per_gpu, plan.images_per_gpu, plan.global_images) == (6, 144, 48 * 24)
    assert (plan.micro_batch, plan.grad_accum) == (9, 16)  # docs/paper-scale.md's example plan


@pytest.mark.parametrize("backend", ["nft", "grpo"])
def test_sd3_tiny_runs_one_recast_iteration(tmp_path, backend):
    cfg = preset("ci", world="sd3-tiny", rewards=("jpeg", "rank:jpeg"), lam=(2.0, 1.0), backend=backend,
                 iterations=1, eval_prompts=2, method="recast_live")
    tr = Trainer(cfg, tmp_path)
    assert tuple(tr.world.sample_shape) == (16, 16, 16)  # VAE latents, not pixels
    before = [p.detach().clone() for p in tr.policy.params]
    run = tr.run()
    rec = run.metrics[-1]
    assert run.reward_names == ("jpeg", "rank:jpeg") and rec["reward/jpeg/mean"] < 0  # -(JPEG kB)
    assert 0 <= rec["reward/rank:jpeg/mean"] <= 1 and rec["D"] is not None and len(run.weights) == 1
    W = torch.tensor(run.weights[-1]["W"], dtype=torch.float64)
    torch.testing.assert_close(W.sum(1), torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.policy.params)), "training must move the LoRA"
    assert set(run.evals[-1]) >= {"reward/jpeg", "reward/rank:jpeg", "reward/weighted"}
    assert (tmp_path / "checkpoint.pt").is_file()
    if backend == "nft":  # the trained adapter loads into a stock pipeline and gives the trainer's velocities
        from recast.sampling import predict_velocity
        from recast.worlds.sd3.lora import save_lora
        from recast.worlds.sd3.tiny import build_tiny_pipeline

        save_lora(tr.world.transformer, tmp_path / "lora")
        pipe = build_tiny_pipeline(cfg.seed)
        x = torch.randn(2, *tr.world.sample_shape, generator=torch.Generator().manual_seed(0))
        e = tr.world.encode_prompts(["two dogs", "a red cat"])
        with torch.no_grad():
            base = predict_velocity(pipe.transformer, x, 0.5, e)
            pipe.load_lora_weights(tmp_path / "lora")
            trained = predict_velocity(tr.world.transformer, x, 0.5, e)
            torch.testing.assert_close(predict_velocity(pipe.transformer, x, 0.5, e), trained)
        print("max |v_trained - v_base|", float((trained - base).abs().max()))
        assert float((trained - base).abs().max()) > 1e-4  # so the match above is not the base model's


# The non-time fields of metrics/eval/weights.jsonl of a 2-iteration ci run. Until 2026-12-01 this was a sha256 of
# them (cb60ee73... on main before the world seam, d8e0c15, and after it; moved by the changes merged beside the seam,
# the new base model, compose's position_flat / size_half_max and then sharpness; last cb574397...; regenerated
# when sharpness began to leave out isolated specks, the glyph-only round, which moved its rows and the loss). A hash
# pins the last bits, and those differ between CPUs: on an AMD EPYC machine every run of this repo agrees with another
# machine's to about 1e-6 relative, never bit for bit (research/rounds/19-lambda-sweep.md "Reproducing across
# machines"), so the hash failed there at a commit whose CI passed. The records are now compared field by field: the
# same keys and lines, discrete values exactly, numbers to 1e-4 relative. A change here means the digit world's numbers
# changed: find out why before regenerating tests/data/ci_run_records.json (a torch / diffusers upgrade can legitimately
# move the last bits). Re-recorded 2026-12-06 when the paper's recipe took the name "recast" (issue 56): the ci preset
# now trains the paper's static baseline ("pre" aggregation, no weights.jsonl), every signal is computed in float64,
# and the metrics gained signal/sd.
CI_RUN_RECORDS = ROOT / "tests" / "data" / "ci_run_records.json"


def _close(got, want, where: str) -> None:
    """Nested records equal, numbers to 1e-4 relative (1e-7 absolute), everything else exactly. A row of gains is
    compared to 1e-4 of its own total: each gain is a difference of two discriminabilities, so a small one carries
    their last bits amplified (on an AMD EPYC CPU, a 7.8e-4 gain of a row summing to several times that moved by 3e-4
    relative while every D, W and loss agreed to 1e-4)."""
    if where.endswith(".gains") and isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            scale = sum(abs(v) for v in w)
            assert g == pytest.approx(w, rel=1e-4, abs=max(1e-4 * scale, 1e-7)), f"{where}[{i}]: {g} != {w}"
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, (int, float)) and got == pytest.approx(want, rel=1e-4, abs=1e-7), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def test_digit_world_numbers_unchanged_by_the_seam(tmp_path):
    train(preset("ci", iterations=2), tmp_path)
    want = json.loads(CI_RUN_RECORDS.read_text())
    got = {name: [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
                  for line in (tmp_path / name).read_text().splitlines()] for name in want}
    _close(got, want, "ci run")
    with pytest.raises(AssertionError, match="loss"):  # a change in the fourth digit of any number is caught
        moved = json.loads(json.dumps(want))
        moved["metrics.jsonl"][0]["loss/loss"] *= 1.001
        _close(got, moved, "ci run")


def test_policy_trains_fp32_lora_on_a_bf16_base():
    from diffusers import SD3Transformer2DModel

    from recast.sampling import PromptEmbeds, predict_velocity
    from recast.trainer.policy import Policy

    torch.manual_seed(0)
    tr = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=2, out_channels=2, num_layers=1,
                               attention_head_dim=8, num_attention_heads=2, joint_attention_dim=8,
                               caption_projection_dim=16, pooled_projection_dim=8, pos_embed_max_size=4)
    pol = Policy(tr.to(torch.bfloat16), lora_rank=2, lora_alpha=4.0)
    assert pol.params and all(p.dtype == torch.float32 for p in pol.params + pol.old + pol.ema)
    assert all(p.dtype == torch.bfloat16 for n, p in tr.named_parameters() if "lora_" not in n)
    e = PromptEmbeds(torch.randn(1, 3, 8, dtype=torch.bfloat16), torch.randn(1, 8, dtype=torch.bfloat16))
    v = predict_velocity(tr, torch.randn(1, 2, 8, 8, dtype=torch.bfloat16), 0.5, e)
    v.float().pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in pol.params)

"""The command line: a ci run end to end, and bad input exits 2 with a message before any compute."""

import json

import pytest

from recast.cli import config_from_args, build_parser, main


def test_cli_train_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "ci", "--setting", "compose", "--method", "recast", "--lam", "0.4,0.15,0.15,0.15,0.15",
            "--iterations", "1", "--out", str(out)]
    assert main(args) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["lam"] == [0.4, 0.15, 0.15, 0.15, 0.15] and cfg["_run"]["lam"] == cfg["lam"]
    assert main(args[:-4] + ["--iterations", "2", "--out", str(out), "--resume"]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


def test_cli_overrides():
    args = build_parser().parse_args(["train", "--preset", "ci", "--out", "x", "--backend", "grpo",
                                      "--set", "nft_beta=0.5", "--set", "fixed_W=0.5,0;0,0.5"])
    cfg = config_from_args(args)
    assert cfg.backend == "grpo" and cfg.nft_beta == 0.5 and cfg.fixed_W == ((0.5, 0.0), (0.0, 0.5))


def test_kl_beta_and_ema_decay_follow_the_setting_unless_given():
    """paper (= cpu), reading and gpu take kl_beta 2 in quality and 1 elsewhere; reading's ema_decay is 0 in compose and
    0.9 elsewhere, the paper's recipe has no EMA (0) anywhere; an explicit field or a reward list keeps control."""
    from recast.config import preset

    for name in ("cpu", "paper", "reading"):
        assert preset(name).kl_beta == 1.0 and preset(name, setting="compose").kl_beta == 1.0
        assert preset(name, setting="quality").kl_beta == 2.0 and preset(name, setting="timing").kl_beta == 1.0
        assert preset(name, setting="quality", kl_beta=0.5).kl_beta == 0.5
        assert preset(name, setting="quality", rewards=("sharpness",)).kl_beta == 1.0
    assert preset("gpu", setting="quality").kl_beta == 2.0
    assert preset("ci", setting="quality").kl_beta == 0.0 and preset("sd35", setting="quality").kl_beta == 1e-4
    for preset_args in (["--setting", "quality"], ["--setting", "quality", "--set", "kl_beta=5"]):
        args = build_parser().parse_args(["train", "--preset", "cpu", "--out", "x", *preset_args])
        assert config_from_args(args).kl_beta == (5.0 if "--set" in preset_args else 2.0)
    # ema_decay: the paper's recipe evaluates the trained weights; the reading evaluates compose's raw weights (0) and
    # every other setting's EMA (0.9)
    assert preset("cpu").ema_decay == 0.0 and preset("cpu", setting="quality").ema_decay == 0.0
    assert preset("reading").ema_decay == 0.0 and preset("reading", setting="compose").ema_decay == 0.0
    assert preset("reading", setting="quality").ema_decay == 0.9 and preset("gpu", setting="compose").ema_decay == 0.0
    assert preset("reading", setting="compose", ema_decay=0.5).ema_decay == 0.5
    assert preset("reading", setting="compose", rewards=("color",)).ema_decay == 0.9
    assert preset("reading", setting="compose", kl_beta=2.0).ema_decay == 0.0  # one explicit field keeps the others
    args = build_parser().parse_args(["train", "--preset", "reading", "--out", "x", "--setting", "compose"])
    assert config_from_args(args).ema_decay == 0.0


def test_quality_defaults_to_sharpness_heavy_budgets_and_an_explicit_lam_wins():
    """The digit world's quality setting trains the λ-sweep's sharpness-heavy budgets unless λ is given; compose, the
    timing control and an explicit reward list get equal budgets; every preset and the CLI resolve alike."""
    import torch

    from recast.config import preset, resolve_budgets, resolve_world
    from recast.worlds.digits.rewards import BUDGETS, SETTINGS
    from recast.experiments.sweep import budget_grid
    from recast.trainer.validate import validate_config
    from recast.world import world_info

    assert BUDGETS["quality"] == budget_grid(SETTINGS["quality"])["sharpness-heavy"]
    for setting, lam in BUDGETS.items():  # every default names a setting and has one budget >= 0 per reward
        assert len(lam) == len(SETTINGS[setting]) and min(lam) >= 0 and sum(lam) > 0
    assert world_info("tiny").setting_budgets == BUDGETS
    assert world_info(resolve_world("data/digit_base")).setting_budgets == BUDGETS
    sharp = torch.tensor(BUDGETS["quality"], dtype=torch.float64) / sum(BUDGETS["quality"])
    for name in ("cpu", "gpu", "ci"):
        cfg = preset(name, setting="quality", world="tiny", device="cpu", method="static")
        assert resolve_budgets(cfg) == BUDGETS["quality"]
        assert torch.equal(validate_config(cfg).lam, sharp)
    equal4, equal5 = torch.full((4,), 0.25, dtype=torch.float64), torch.full((5,), 0.2, dtype=torch.float64)
    assert torch.equal(validate_config(preset("ci", setting="compose")).lam, equal5)
    assert torch.equal(validate_config(preset("ci", setting="timing")).lam, torch.full((2,), 0.5, dtype=torch.float64))
    assert torch.equal(validate_config(preset("ci", setting="quality", lam=(1, 1, 1, 1))).lam, equal4)
    assert torch.equal(validate_config(preset("ci", setting="quality", lam=(0, 0, 0, 1))).lam,
                       torch.tensor([0.0, 0, 0, 1], dtype=torch.float64))
    # a reward list is not a setting: equal budgets, even when it names quality's rewards
    assert resolve_budgets(preset("ci", setting="quality", rewards=SETTINGS["quality"])) == ()
    assert torch.equal(validate_config(preset("ci", rewards=SETTINGS["quality"])).lam, equal4)
    # the CLI: no --lam takes the setting's budgets, --lam wins
    for extra, want in (([], sharp), (["--lam", "1,1,1,1"], equal4)):
        args = build_parser().parse_args(["train", "--preset", "ci", "--setting", "quality", "--out", "x", *extra])
        assert torch.equal(validate_config(config_from_args(args)).lam, want)


def test_cli_bad_input(tmp_path, capsys):
    assert main(["train", "--preset", "ci", "--lam", "1,2", "--out", str(tmp_path / "a")]) == 2
    assert "5 rewards" in capsys.readouterr().err
    assert main(["train", "--preset", "ci", "--setting", "nope", "--out", str(tmp_path / "b")]) == 2
    assert "unknown setting" in capsys.readouterr().err
    assert main(["train", "--preset", "ci", "--out", str(tmp_path / "c"), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_missing_base_model_is_a_clear_error_not_a_silent_fallback(tmp_path):
    from recast.config import preset
    from recast.trainer.validate import validate

    with pytest.raises(FileNotFoundError, match="no digit world"):
        validate(preset("cpu", world=str(tmp_path / "nowhere")), tmp_path / "run")
    assert preset("cpu").world == "data/digit_base"


@pytest.mark.slow
def test_cli_profile_writes_json_and_figure_and_prints_the_same_object(tmp_path, capsys):
    out = tmp_path / "prof"
    args = ["profile", "--setting", "compose", "--num-prompts", "6", "--num-steps", "3", "--bootstrap", "5",
            "--out", str(out), "--json"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "profile.json").read_text())
    assert printed == written
    assert written["reward_names"] == ["digit", "color", "position_flat", "size_half_max", "sharpness"]
    assert len(written["sigmas"]) == 4
    for key in ("D", "D_lo", "D_hi"):
        assert len(written[key]) == 5 and len(written[key][0]) == 4  # (K rewards, T + 1 grid points)
    W = written["W"]
    assert all(abs(sum(row) - 0.2) < 1e-9 for row in W) and len(W[0]) == 3
    assert (out / "profile.png").is_file() and (out / "profile.pdf").is_file()


@pytest.mark.parametrize("extra, msg", [
    (["--estimator", "exact"], "--estimator"), (["--lam", "1,2"], "--lam"), (["--setting", "nope"], "--setting"),
    (["--split", "val"], "split"), (["--num-prompts", "2"], "--num-prompts"),
    (["--world", "/nowhere"], "no digit world"),
])
def test_cli_profile_bad_input_exits_2_before_compute(tmp_path, capsys, extra, msg):
    assert main(["profile", "--out", str(tmp_path / "p"), *extra]) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "p" / "profile.json").exists()


@pytest.mark.slow
def test_cli_profile_runs_on_any_world_spec_and_says_where_it_wrote(tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["profile", "--world", "tiny", "--rewards", "sharpness,clean", "--num-prompts", "4", "--num-steps", "2",
                 "--bootstrap", "0", "--out", str(out)]) == 0
    assert f"profile of sharpness, clean (tweedie, 4 samples) in {out}/profile.json" in capsys.readouterr().out
    assert json.loads((out / "profile.json").read_text())["world"] == "tiny"


@pytest.mark.slow
def test_cli_train_fixed_w_from_a_profile_trains_at_exactly_that_w(tmp_path, capsys):
    """`profile` then `train --fixed-w profile.json`: method=fixed at the profile's W, applied unchanged every
    iteration; a W for other rewards, another grid or other budgets, or a clash with --method, exits 2 before any run."""
    prof = tmp_path / "prof"
    assert main(["profile", "--world", "tiny", "--rewards", "sharpness,clean", "--lam", "0.7,0.3", "--num-prompts",
                 "4", "--num-steps", "4", "--bootstrap", "0", "--out", str(prof)]) == 0
    W = json.loads((prof / "profile.json").read_text())["W"]
    base = ["train", "--preset", "ci", "--rewards", "sharpness,clean", "--lam", "0.7,0.3", "--iterations", "2"]
    out = tmp_path / "run"
    assert main(base + ["--fixed-w", str(prof / "profile.json"), "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["method"] == "fixed" and cfg["fixed_W"] == W
    from recast.trainer import Trainer

    trainer = Trainer(config_from_args(build_parser().parse_args(base + ["--fixed-w", str(prof / "profile.json"),
                                                                        "--out", "x"])), tmp_path / "run2")
    import torch

    assert torch.allclose(trainer.W.double(), torch.tensor(W, dtype=torch.float64), atol=1e-6)  # the W every iteration's advantages are built with
    capsys.readouterr()

    mean_w = tmp_path / "mean_W.json"  # research/probes/fixed_w_runs.py's file: no reward names, so only the marginals check
    mean_w.write_text(json.dumps({"W": [[0.175] * 4, [0.075] * 4]}))
    bad = {
        "missing": (["--fixed-w", str(tmp_path / "nope.json")], "no such file"),
        "order": (["--fixed-w", str(prof / "profile.json"), "--rewards", "clean,sharpness"], "same order"),
        "method": (["--fixed-w", str(prof / "profile.json"), "--method", "recast"], "drop --method recast"),
        "twice": (["--fixed-w", str(prof / "profile.json"), "--set", "fixed_W=0.5;0.5"], "not both"),
        "budgets": (["--fixed-w", str(mean_w), "--lam", "0.5,0.5"], "row sums"),
    }
    not_json = tmp_path / "W.txt"
    not_json.write_text("0.5,0.5")
    bad["not json"] = (["--fixed-w", str(not_json)], "not a JSON file")
    no_w = tmp_path / "no_W.json"
    no_w.write_text(json.dumps({"D": [[0.1]]}))
    bad["no W"] = (["--fixed-w", str(no_w)], '"W" matrix')
    for name, (extra, msg) in bad.items():
        run = tmp_path / f"bad_{name.replace(' ', '_')}"
        assert main(base + extra + ["--out", str(run)]) == 2, name
        assert msg in capsys.readouterr().err, name
        assert not (run / "config.json").exists(), name
    other_grid = tmp_path / "prof6"
    assert main(["profile", "--world", "tiny", "--rewards", "sharpness,clean", "--lam", "0.7,0.3", "--num-prompts",
                 "4", "--num-steps", "6", "--bootstrap", "0", "--out", str(other_grid)]) == 0
    capsys.readouterr()
    assert main(base + ["--fixed-w", str(other_grid / "profile.json"), "--out", str(tmp_path / "bad_grid")]) == 2
    assert "shape" in capsys.readouterr().err

"""The command line: a ci run end to end, and bad input exits 2 with a message before any compute."""

import json

import pytest

from recast.__main__ import config_from_args, build_parser, main


def test_cli_train_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "ci", "--setting", "compose", "--method", "recast", "--lam", "0.4,0.2,0.2,0.2",
            "--iterations", "1", "--out", str(out)]
    assert main(args) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["lam"] == [0.4, 0.2, 0.2, 0.2] and cfg["_run"]["lam"] == [0.4, 0.2, 0.2, 0.2]
    assert main(args[:-4] + ["--iterations", "2", "--out", str(out), "--resume"]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


def test_cli_overrides():
    args = build_parser().parse_args(["train", "--preset", "ci", "--out", "x", "--backend", "grpo",
                                      "--set", "nft_beta=0.5", "--set", "fixed_W=0.5,0;0,0.5"])
    cfg = config_from_args(args)
    assert cfg.backend == "grpo" and cfg.nft_beta == 0.5 and cfg.fixed_W == ((0.5, 0.0), (0.0, 0.5))


def test_cli_bad_input(tmp_path, capsys):
    assert main(["train", "--preset", "ci", "--lam", "1,2", "--out", str(tmp_path / "a")]) == 2
    assert "4 rewards" in capsys.readouterr().err
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

"""Round-4 reliability probe's bad cases (docs: /work/shared/reliability-r4.md), one regression test each."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from recast.credit import Credit


@pytest.mark.parametrize("method,scale", [("fixed", 2.0), ("recast_live", 2.0), ("recast_live", 1e300),
                                          ("recast_live", 1e-300)])
def test_G37_scaled_state_W_refused(method, scale):
    """G37 / G37b / G37c / G37d: a state W off its marginals by a common factor is refused, not kept raw."""
    R, g = torch.rand(2, 8, dtype=torch.float64), [i // 4 for i in range(8)]
    kw = {"fixed_W": torch.full((2, 4), 1 / 8)} if method == "fixed" else {}
    c = Credit(["a", "b"], 4, [1, 1], method=method, min_pairs=2, bootstrap=8, **kw)
    c.normalise(R, g)
    s = c.state_dict()
    s["W"] = s["W"] * scale
    d = Credit(["a", "b"], 4, [1, 1], method=method, min_pairs=2, bootstrap=8, **kw)
    with pytest.raises(ValueError, match="credit state entry 'W'"):
        d.load_state_dict(s)
    d.load_state_dict(c.state_dict())  # the state as saved still loads


@pytest.mark.parametrize("kw", [{"sigma": [1.0, float("nan")]}, {"timestep": [float("nan"), float("nan")]}])
def test_G07b_G07c_nan_sigma_or_timestep_refused(kw):
    c = Credit(["a", "b"], 4, [1, 1], method="static",
               sigmas=torch.tensor([1, .75, .5, .25, 0.], dtype=torch.float64))
    c.normalise(torch.rand(2, 8), [i // 4 for i in range(8)])
    with pytest.raises(ValueError, match="non-finite"):
        c.signal(torch.arange(2), **kw)


def test_G69_inconsistent_weight_table_object_refused():
    from recast.archives import ArchiveError, load_profile, table_from_profile

    t = table_from_profile(load_profile("data/profiles/tiny_renderings_T4.npz", ["digit", "color"]), [1, 1])
    Credit(["digit", "color"], 4, weights=t, aggregation="per_reward")  # the table as made is fine
    bad = dataclasses.replace(t, TW=3 * t.TW)
    with pytest.raises(ArchiveError, match="weights="):
        Credit(["digit", "color"], 4, weights=bad, aggregation="per_reward")
    with pytest.raises(ArchiveError, match="weights="):
        Credit.from_table(bad, aggregation="per_reward")


@pytest.mark.parametrize("dangling", [True, False])
def test_F07_F07b_tiny_sd3_marker_link_refused(tmp_path, capsys, dangling):
    """F07 (a dangling link at OUT/tiny_sd3.json) and F07b (a link to the user's JSON): refused before anything is
    built, nothing written through the link."""
    from recast.cli import main

    target = tmp_path / "outside.json"
    if not dangling:
        target.write_text('{"seed": 0}\n')
    out = tmp_path / "T"
    out.mkdir()
    (out / "tiny_sd3.json").symlink_to(target)
    assert main(["tiny-sd3", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "symbolic link" in err and err.count("\n") == 1
    assert target.exists() != dangling and (dangling or target.read_text() == '{"seed": 0}\n')
    assert not (out / "sd35").exists() and not (out / ".sd35.partial").exists()


def test_B10d_profile_auto_refuses_another_world(tmp_path, capsys):
    """B10d: --auto onto a profile made with another world is refused naming the world, the profile kept as it was."""
    from recast.cli import main

    out = tmp_path / "P.npz"
    common = ["--rewards", "digit,color", "--num-steps", "2", "--num-continuations", "1", "--num-base", "1",
              "--substeps", "1", "--num-prompts", "4", "--proposal", "renderings", "--auto", "--out", str(out)]
    assert main(["profile", "--world", "tiny", *common]) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert main(["profile", "--world", "tiny", *common]) == 0
    assert "kept" in capsys.readouterr().out
    assert main(["profile", "--world", "data/digit_base", *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "world: 'tiny' there vs 'data/digit_base' now" in err
    assert out.read_bytes() == before


# --------------------------------------------------------------------------- stages (--initialize-from)
def test_I05_I05b_stage_trains_at_its_own_lr_weight_decay_and_betas(tmp_path):
    from recast.config import preset
    from recast.trainer import Trainer

    Trainer(preset("ci", iterations=1, lr=0.001), tmp_path / "src").run()
    cfg = preset("ci", iterations=1, lr=0.01, weight_decay=0.05, adam_betas=(0.8, 0.9),
                 initialize_from=str(tmp_path / "src"))
    s2 = Trainer(cfg, tmp_path / "s2")
    assert s2.update_offset == 1 and s2.optimizer.state  # the source's moments are kept ...
    for group in s2.optimizer.param_groups:  # ... its hyperparameters are not
        assert (group["lr"], tuple(group["betas"]), group["weight_decay"]) == (0.01, (0.8, 0.9), 0.05)
    s2.run()
    state = torch.load(tmp_path / "s2" / "checkpoint.pt", weights_only=True)
    assert [(g["lr"], tuple(g["betas"]), g["weight_decay"]) for g in state["optimizer"]["param_groups"]] \
        == [(0.01, (0.8, 0.9), 0.05)] * len(state["optimizer"]["param_groups"])


def test_I07_source_whose_checkpoint_is_another_runs_is_refused(tmp_path):
    import shutil

    from recast.config import preset
    from recast.trainer import Trainer

    Trainer(preset("ci", iterations=1), tmp_path / "A").run()
    Trainer(preset("ci", iterations=1, lr=0.001), tmp_path / "B").run()
    shutil.copytree(tmp_path / "A", tmp_path / "A2")
    shutil.copy(tmp_path / "B" / "checkpoint.pt", tmp_path / "A2" / "checkpoint.pt")
    with pytest.raises(ValueError, match="initialize_from: .*is not the checkpoint of the run.*lr"):
        Trainer(preset("ci", iterations=1, initialize_from=str(tmp_path / "A2")), tmp_path / "s2")


def test_I10b_unfinished_source_is_refused_naming_iterations(tmp_path):
    import json

    from recast.config import preset
    from recast.trainer import Trainer

    Trainer(preset("ci", iterations=2), tmp_path / "src").run()
    p = tmp_path / "src" / "config.json"  # a run killed at iteration 2 of 400 (iterations is a field a resume may change)
    cfg = json.loads(p.read_text())
    cfg["iterations"] = 400
    p.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="never finished: it reached iteration 2 of 400 planned"):
        Trainer(preset("ci", iterations=1, initialize_from=str(tmp_path / "src")), tmp_path / "s2")
    assert not (tmp_path / "s2").exists()


def test_E04_paper_eval_refuses_an_unfinished_run(tmp_path, capsys):
    import json

    from recast.config import preset
    from recast.experiments.paper_scoring import main
    from recast.trainer import Trainer

    for method in ("recast", "static"):
        Trainer(preset("ci", method=method, iterations=1, eval_prompts=2), tmp_path / "runs" / method / "seed_0").run()
    p = tmp_path / "runs" / "static" / "seed_0" / "config.json"  # the static run as a killed one leaves it
    cfg = json.loads(p.read_text())
    cfg["iterations"] = 300
    p.write_text(json.dumps(cfg))
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "ev"), "--no-pairwise", "--num-prompts", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 1 run(s) never finished") and "iteration 1 of 300" in err and "static" in err
    assert err.count("\n") == 1 and not (tmp_path / "ev" / "paper_eval.json").exists()

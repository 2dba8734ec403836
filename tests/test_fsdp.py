"""The transformer sharded over two CPU processes (torch's FSDP2 under gloo, `recast.trainer.sharding`): it trains what
DDP trains, really shards, resumes bit-exactly after a kill, reads an unsharded run's checkpoint; and the configs it
cannot keep in step are refused before any compute.
"""

import json

import pytest
import torch

from multiproc import launch

CI = ["--preset", "ci", "--iterations", "4", "--method", "recast_live", "--set", "train_columns=0", "--set",
      "kl_beta=0.1", "--set", "checkpoint_every=2"]
FSDP = ["--set", "fsdp=true"]


def _dumps(folder):
    return [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def _records(run, name="metrics.jsonl"):
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in (run / name).read_text().splitlines()]


def _run(base, args, **kwargs):
    (base / "dump").mkdir(parents=True, exist_ok=True)
    proc = launch(base / "dump", [*args, "--out", str(base / "run")], **kwargs)
    return proc, base / "run", base / "dump"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    proc, run, dump = _run(tmp_path_factory.mktemp("fsdp"), [*CI, *FSDP])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, _dumps(dump)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    proc, run, dump = _run(tmp_path_factory.mktemp("ddp"), CI)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, _dumps(dump)


@pytest.mark.slow
def test_sharded_training_is_ddp_training(sharded, ddp):
    (run, (s0, s1)), (drun, (d0, _)) = sharded, ddp
    assert s0["sharded"] and not d0["sharded"]
    for name in ("params", "old", "ema"):
        assert all(torch.equal(a, b) for a, b in zip(s0[name], s1[name])), name  # whole tensors agree on both
        for a, b in zip(s0[name], d0[name]):  # the same training as DDP, up to the order of float additions
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # really sharded: each process holds its half of every parameter's first dimension, the two halves differ
    for full, p0, p1 in zip(s0["params"], s0["local_params"], s1["local_params"]):
        assert p0.shape[0] == -(-full.shape[0] // 2) and torch.equal(torch.cat([p0, p1])[:full.shape[0]], full)
    torch.testing.assert_close(s0["W"], d0["W"], rtol=0, atol=1e-6)
    for a, b in zip(_records(run), _records(drun)):
        assert a.keys() == b.keys() and a["iteration"] == b["iteration"]
        for k in ("loss/loss", "loss/kl", "grad_norm", "reward/weighted"):
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-8), k
    # one checkpoint layout, sharded or not: the optimiser state numbered by parameter, whole
    opt, dopt = (torch.load(r / "checkpoint.pt", weights_only=True)["optimizer"] for r in (run, drun))
    assert sorted(opt["state"]) == sorted(dopt["state"]) and opt["param_groups"][0]["params"] == \
        dopt["param_groups"][0]["params"]
    for i in opt["state"]:
        torch.testing.assert_close(opt["state"][i]["exp_avg"], dopt["state"][i]["exp_avg"], rtol=1e-4, atol=1e-9)
    assert _records(run, "eval.jsonl")[-1]["iteration"] == 4  # evaluated on both processes, logged once


@pytest.mark.slow
def test_a_killed_sharded_run_resumes_bit_identical(sharded, tmp_path):
    run, want = sharded
    killed, out, dump = _run(tmp_path, [*CI, *FSDP], kill_after_checkpoint=1)
    assert killed.returncode != 0 and torch.load(out / "checkpoint.pt", weights_only=True)["iteration"] == 2
    proc, out, dump = _run(tmp_path, [*CI, *FSDP, "--auto"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = _dumps(dump)
    for r in (0, 1):
        for name in ("params", "old", "ema", "local_params"):
            assert all(torch.equal(a, b) for a, b in zip(got[r][name], want[r][name])), (r, name)
    assert _records(out) == _records(run) and _records(out, "weights.jsonl") == _records(run, "weights.jsonl")


@pytest.mark.slow
def test_a_sharded_stage_starts_from_an_unsharded_run(ddp, tmp_path):
    drun, (d0, _) = ddp
    proc, out, dump = _run(tmp_path, ["--preset", "ci", "--iterations", "1", "--method", "recast_live", "--set",
                                      "train_columns=0", "--set", "kl_beta=0.1", *FSDP, "--initialize-from",
                                      str(drun)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    s0, s1 = _dumps(dump)
    assert all(torch.equal(a, b) for a, b in zip(s0["params"], s1["params"]))
    marker = json.loads((out / "config.json").read_text())["_run"]
    assert marker["initialized_from"]["updates"] == 4 and marker["num_processes"] == 2
    # one update from the DDP run's last weights: close to them, and moved
    moved = [float((a - b).abs().max()) for a, b in zip(s0["params"], d0["params"])]
    assert 0 < max(moved) < 0.05


@pytest.mark.parametrize("sets,match", [
    ({"train_columns": 2}, "config field fsdp: needs every sample to train every column"),
    ({"lora_merged_old": True}, "config field lora_merged_old: not with fsdp"),
    ({"compile_blocks": True}, "config field compile_blocks: not with fsdp")])
def test_configs_a_sharded_run_cannot_keep_in_step_are_refused(sets, match):
    from recast.config import preset
    from recast.trainer.validate import validate_config

    with pytest.raises(ValueError, match=match):
        validate_config(preset("ci", fsdp=True, **sets))
    validate_config(preset("ci", fsdp=True, train_columns=4))  # every column of 4: in step
    validate_config(preset("ci", fsdp=True, backend="grpo", train_columns=3))  # grpo trains T - 1


def test_one_process_is_refused(tmp_path):
    from recast.config import preset
    from recast.trainer import Trainer

    with pytest.raises(ValueError, match="config field fsdp: sharding needs several processes"):
        Trainer(preset("ci", fsdp=True), tmp_path / "run")
    assert not (tmp_path / "run" / "config.json").exists()


def test_whole_tensors_unsharded_are_the_tensors_themselves():
    from recast.trainer.sharding import copy_full_, full_tensor, is_sharded

    t = torch.arange(6.0).reshape(3, 2)
    assert full_tensor(t) is t and not is_sharded(t)
    dst = torch.zeros(3, 2)
    copy_full_(dst, t)
    assert torch.equal(dst, t)

"""Real two-process training on CPU (gloo, started by torchrun through tests/multiproc.py): the processes stay in step,
draw disjoint prompts, log global numbers, resume bit-exactly after a kill, refuse another process count, and survive
the draw that once made one process skip a gather.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from multiproc import ROOT, launch

pytestmark = pytest.mark.slow

CI = ["--preset", "ci", "--iterations", "4", "--method", "recast_live", "--set", "checkpoint_every=2"]


def _dumps(folder):
    return [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def _records(run, name="metrics.jsonl"):
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in (run / name).read_text().splitlines()]


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted two-process run of 4 iterations (checkpoints at 2 and 4) and what each process saw."""
    base = tmp_path_factory.mktemp("straight")
    (base / "dump").mkdir()
    _ok(launch(base / "dump", [*CI, "--out", str(base / "run")]))
    return base / "run", _dumps(base / "dump")


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)


def test_two_processes_stay_in_step_and_split_the_batch(straight):
    run, (r0, r1) = straight
    assert (r0["num_processes"], r1["num_processes"], r0["iteration"], r1["iteration"]) == (2, 2, 4, 4)
    for name in ("params", "old", "ema"):
        assert _same(r0[name], r1[name]), name
    assert torch.equal(r0["W"], r1["W"]) and torch.equal(r0["D"], r1["D"])
    saved = torch.load(run / "checkpoint.pt", weights_only=True)["policy"]  # written by the main process alone
    assert _same([saved["params"][n] for n in saved["names"]], r1["params"])
    for a, b in zip(r0["prompts"], r1["prompts"]):  # every iteration: the processes' prompts are disjoint
        assert len(a) == len(b) == 4 and not set(a) & set(b)
    metrics = json.loads((run / "config.json").read_text())
    assert metrics["_run"]["num_processes"] == 2 and metrics["_run"]["global_batch"] == {"prompts": 4, "images": 8}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for i, rec in enumerate(rows):
        assert rec["reward_queries"] == 8 * (i + 1)  # the global batch, counted once
        for part in ("loss", "policy"):  # the logged loss is the mean of the processes' own
            assert rec[f"loss/{part}"] == pytest.approx((r0["parts"][i][part] + r1["parts"][i][part]) / 2, rel=1e-12)
        assert r0["parts"][i]["loss"] != r1["parts"][i]["loss"]  # so the mean above is not one process's value


def test_a_killed_two_process_run_resumes_bit_identical(straight, tmp_path):
    run, want = straight
    out = tmp_path / "run"
    (tmp_path / "dump").mkdir()
    killed = launch(tmp_path / "dump", [*CI, "--out", str(out)], kill_after_checkpoint=1)  # SIGKILL after iteration 2's
    assert killed.returncode != 0 and not (tmp_path / "dump" / "rank0.pt").exists()
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["iteration"] == 2 and state["num_processes"] == 2 and len(state["rng_ranks"]) == 2
    assert not torch.equal(state["rng_ranks"][0]["generators"]["train"], state["rng_ranks"][1]["generators"]["train"])
    _ok(launch(tmp_path / "dump", [*CI, "--out", str(out), "--auto"]))
    got = _dumps(tmp_path / "dump")
    for r in (0, 1):
        assert got[r]["prompts"] == want[r]["prompts"][2:]  # each process continued its own draws
        for name in ("params", "old", "ema"):
            assert _same(got[r][name], want[r][name]), (r, name)
        assert torch.equal(got[r]["W"], want[r]["W"])
    assert _records(out) == _records(run) and _records(out, "weights.jsonl") == _records(run, "weights.jsonl")


def test_a_sigterm_to_one_process_stops_both_after_the_same_iteration_and_resumes_bit_identical(straight, tmp_path):
    run, want = straight
    out, dump = tmp_path / "run", tmp_path / "dump"
    dump.mkdir()
    stopped = launch(dump, [*CI, "--out", str(out)], sigterm=(1, 3))  # rank 1 alone is signalled, in iteration 3
    assert stopped.returncode != 0 and not (dump / "rank0.pt").exists()
    assert [json.loads((dump / f"stopped{r}.json").read_text()) for r in (0, 1)] == [{"iteration": 3, "signum": 15}] * 2
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["iteration"] == 3 and len(state["rng_ranks"]) == 2  # off the every-2 schedule: the stop's own
    assert len(_records(out)) == 3
    _ok(launch(dump, [*CI, "--out", str(out), "--auto"]))
    got = _dumps(dump)
    for r in (0, 1):
        assert got[r]["prompts"] == want[r]["prompts"][3:]
        for name in ("params", "old", "ema"):
            assert _same(got[r][name], want[r][name]), (r, name)
    assert _records(out) == _records(run) and _records(out, "weights.jsonl") == _records(run, "weights.jsonl")


def test_another_process_count_is_refused_unless_asked(straight, tmp_path, capsys):
    from recast.config import preset
    from recast.trainer import Trainer

    run = tmp_path / "run"
    shutil.copytree(straight[0], run)
    cfg = preset("ci", iterations=5, method="recast_live", checkpoint_every=2)
    with pytest.raises(ValueError, match=r"trained on 2 processes \(8 images per iteration\) and this launch has 1 "
                                         r"process \(4\)"):
        Trainer(cfg, run, resume=True)
    with pytest.raises(ValueError, match="trained on 2 processes"):
        Trainer(cfg, run, resume="auto")
    done = Trainer(cfg.replace(iterations=4), run, resume="auto")
    done.release()
    assert done.mode == "finished"  # nothing to train: returned as it is, whatever launched it
    Trainer(cfg, run, resume=True, change_processes=True).run()
    assert "the global batch changes from 8 to 4 images (2 prompts) per iteration" in capsys.readouterr().out
    marker = json.loads((run / "config.json").read_text())["_run"]
    assert marker["num_processes"] == 1 and marker["global_batch"] == {"prompts": 2, "images": 4}
    assert marker["process_changes"] == [{"iteration": 4, "from": 2, "to": 1}]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward_queries"] for r in rows] == [8, 16, 24, 32, 36]


def test_the_draw_that_left_one_process_without_proxies_runs(tmp_path):
    # issue 59: with 2 steps, 1 trained column and 2 informativeness samples, a process whose samples all drew
    # column 0 had no x̂_0 and skipped the gather the other joined (gloo: "collective mismatch"; NCCL would hang)
    (tmp_path / "dump").mkdir()
    _ok(launch(tmp_path / "dump", ["--preset", "ci", "--iterations", "4", "--method", "recast_live", "--set",
                                   "num_steps=2", "--set", "train_columns=1", "--set", "informativeness_subset=2",
                                   "--out", str(tmp_path / "run")]))
    r0, r1 = _dumps(tmp_path / "dump")
    assert any(a != b for a, b in zip(r0["had_proxies"], r1["had_proxies"])), "the case was not forced"
    assert r0["iteration"] == r1["iteration"] == 4 and torch.equal(r0["W"], r1["W"])
    assert _same(r0["params"], r1["params"])


def test_per_sample_credit_logs_the_mean_over_processes(tmp_path):
    # otca weights each sample by its own trajectory: a process knows only its own samples' credit, so the logged W
    # is the mean of the processes' means (equal sample counts), while the weights stay in step
    (tmp_path / "dump").mkdir()
    _ok(launch(tmp_path / "dump", ["--preset", "ci", "--iterations", "2", "--method", "otca", "--out",
                                   str(tmp_path / "run")]))
    r0, r1 = _dumps(tmp_path / "dump")
    assert _same(r0["params"], r1["params"]) and not torch.equal(r0["W"], r1["W"])
    logged = torch.tensor(json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])["W"],
                          dtype=r0["W"].dtype)
    torch.testing.assert_close(logged, (r0["W"] + r1["W"]) / 2, rtol=1e-6, atol=1e-9)


def test_accelerate_cpu_launch_of_two_processes_is_refused(tmp_path):
    # accelerate's --cpu runs one process whatever --num_processes says: the run says so instead of training half
    proc = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2",
                           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "recast",
                           "train", "--preset", "ci", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0 and "asked for several processes but started one" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "run" / "config.json").exists()

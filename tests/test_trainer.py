"""The online loop on the ci preset: every backend and method runs, ReCAST with one reward equals the baseline,
bad input fails before any compute, and a NaN loss stops the run with the last checkpoint intact."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from recast.config import preset
from recast.trainer import NonFiniteLossError, Trainer, load_run, train
from recast.trainer.loop import RewardError


def _params(trainer):
    return [p.detach().clone() for p in trainer.policy.params]


@pytest.mark.parametrize("backend", ["nft", "grpo"])
@pytest.mark.parametrize("method", ["recast", "static", "recast_live", "uniform", "reward_sum", "fixed"])
def test_ci_iterations_run(tmp_path, backend, method):
    T = 4
    fixed = ((0.25, 0.25, 0.0, 0.0), (0.0, 0.0, 0.25, 0.25)) if method == "fixed" else ()
    cfg = preset("ci", backend=backend, method=method, iterations=2, rewards=("color", "position"), lam=(1.0, 1.0),
                 fixed_W=fixed, num_steps=T, train_columns=2)
    tr = Trainer(cfg, tmp_path)
    before = _params(tr)
    run = tr.run()
    assert len(run.metrics) == 2 and run.reward_names == ("color", "position")
    rec = run.metrics[-1]
    assert all(rec[f"time/{p}"] >= 0 for p in ("sampling", "rewards", "optimisation"))
    W = torch.tensor(rec["W"], dtype=torch.float64)  # every method but the per-sample baselines has a (K, T) W
    assert W.shape == (2, T)
    torch.testing.assert_close(W.sum(0), torch.full((T,), 1 / T, dtype=torch.float64))
    torch.testing.assert_close(W.sum(1), torch.tensor([0.5, 0.5], dtype=torch.float64))
    if method in ("static", "uniform", "reward_sum"):
        assert torch.equal(W, torch.full((2, T), 0.5 / T, dtype=torch.float64))
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.policy.params)), "training must move the params"
    if method == "recast":  # the run's own table, in the release's format, is the W it trained with
        from recast.archives import load_table

        table = load_table(tmp_path / "recast_weights.npz")
        assert torch.equal(W, torch.from_numpy(table.W)) and rec["D"] is None and not run.weights
        it, W_read = run.W_at(10**9)  # what the figures read: the fixed W, from the metrics
        assert it == 2 and np.array_equal(W_read, table.W)
        with pytest.raises(ValueError, match="no metrics record carries W"):
            replace(run, metrics=[]).W_at(1)
    if method == "recast_live":
        assert len(run.weights) == 2 and rec["D"] is not None
        rows = torch.tensor(run.weights[-1]["W"], dtype=torch.float64).sum(1)
        torch.testing.assert_close(rows, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert (tmp_path / "checkpoint.pt").is_file() and list((tmp_path / "grids").glob("*.png"))


@pytest.mark.parametrize("method,baseline", [("recast", "static"), ("recast_live", "uniform")])
def test_recast_with_one_reward_equals_its_baseline(tmp_path, method, baseline):
    """With one reward W's marginals force W = λ/T: the paper's ReCAST trains exactly as its static baseline, and our
    live reading exactly as uniform, bit for bit."""
    runs = {}
    for m in (method, baseline):
        cfg = preset("ci", method=m, iterations=3, rewards=("color",), train_columns=3)
        tr = Trainer(cfg, tmp_path / m)
        tr.run()
        runs[m] = tr
    for a, b in zip(runs[method].policy.params, runs[baseline].policy.params):
        assert torch.equal(a, b)
    for a, b in zip(runs[method].policy.ema, runs[baseline].policy.ema):
        assert torch.equal(a, b)


def test_ema_decay_changes_what_is_evaluated_not_what_is_trained(tmp_path):
    """The EMA is read by evaluation only, so ema_decay 0 trains the same weights bit for bit, its EMA is those weights,
    and its evaluation scores them (the cpu preset evaluates compose's raw weights this way)."""
    runs = {}
    for decay in (0.9, 0.0):
        tr = Trainer(preset("ci", iterations=3, ema_decay=decay, eval_every=3), tmp_path / str(decay))
        runs[decay] = (tr, tr.run())
    (a, ra), (b, rb) = runs[0.9], runs[0.0]
    assert all(torch.equal(x, y) for x, y in zip(a.policy.params, b.policy.params))
    assert all(torch.equal(x, y) for x, y in zip(a.policy.old, b.policy.old))
    assert all(torch.equal(e, x) for e, x in zip(b.policy.ema, b.policy.params))
    assert not all(torch.equal(e, x) for e, x in zip(a.policy.ema, a.policy.params))
    strip = lambda recs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]  # noqa: E731
    assert strip(ra.metrics) == strip(rb.metrics)  # training saw nothing of the EMA
    assert ra.evals[-1] != rb.evals[-1]  # evaluation did


def test_recast_every_estimates_D_only_when_it_re_solves_W(tmp_path):
    cfg = preset("ci", iterations=4, rewards=("color", "position"), lam=(1.0, 1.0), recast_every=2,
                 method="recast_live")
    tr = Trainer(cfg, tmp_path)
    run = tr.run()
    assert [w["iteration"] for w in run.weights] == [2, 4] and tr.tracker.num_updates == 2
    assert len(tr.tracker.pool) == 4  # every iteration's pairs are pooled
    D = [rec["D"] for rec in run.metrics]
    assert D[0] is None and D[1] is not None and D[2] == D[1] and D[3] != D[2]
    W = [rec["W"] for rec in run.metrics]  # W is the one in use: λ/T until the first re-solve, then held
    assert W[0] == W[1] and W[2] == W[3] == run.weights[0]["W"]


def test_nan_loss_stops_and_keeps_checkpoint(tmp_path):
    cfg = preset("ci", iterations=1, rewards=("color",))
    train(cfg, tmp_path)
    good = (tmp_path / "checkpoint.pt").read_bytes()
    tr = Trainer(cfg.replace(iterations=3, checkpoint_every=1), tmp_path, resume=True)
    tr.rewards[0] = lambda images, prompts: torch.full((images.shape[0],), float("nan"))
    # named as the reward's fault, not the loss's (which would send the user to lower lr / nft_beta)
    with pytest.raises(RewardError, match=r"reward 'color' returned NaN or inf for 4 of 4 images at iteration 2"):
        tr.run()
    assert (tmp_path / "checkpoint.pt").read_bytes() == good
    assert len(load_run(tmp_path).metrics) == 1


@pytest.mark.parametrize("over, err, msg", [
    (dict(setting="nope"), ValueError, "unknown setting"),
    (dict(rewards=("color", "bogus")), ValueError, "unknown reward"),
    (dict(lam=(1.0, 2.0)), ValueError, "5 rewards"),
    (dict(lam=(1.0, -1.0, 0.0, 0.0, 0.0)), ValueError, ">= 0"),
    (dict(lam=(0.0, 0.0, 0.0, 0.0, 0.0)), ValueError, "all zero"),
    (dict(batch_size=5), ValueError, "does not divide"),
    (dict(method="fixed"), ValueError, "fixed_W"),
    (dict(method="fixed", fixed_W=((1.0,),)), ValueError, "shape"),
    (dict(method="magic"), ValueError, "unknown method"),
    (dict(world="/nonexistent/world"), FileNotFoundError, "no digit world"),
    (dict(nft_beta=0.0), ValueError, "nft_beta"),
])
def test_bad_input_raises_before_compute(tmp_path, over, err, msg):
    with pytest.raises(err, match=msg):
        Trainer(preset("ci", **over), tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_bad_out_dir_and_resume(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="not writable"):
        Trainer(preset("ci"), blocker / "run")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(preset("ci"), tmp_path / "empty", resume=True)
    train(preset("ci", iterations=1), tmp_path / "run")
    with pytest.raises(FileExistsError, match="already holds a run"):
        Trainer(preset("ci", iterations=1), tmp_path / "run")
    with pytest.raises(ValueError, match="nft_beta"):
        Trainer(preset("ci", iterations=2, nft_beta=0.5), tmp_path / "run", resume=True)


def test_resume_compares_the_rewards_and_budgets_a_run_trained_with(tmp_path):
    """A setting's defaults may change between a run and its resume: the run marker's resolved reward names and
    budgets decide, and naming them (--lam, --rewards) resumes the run as it was."""
    import recast.trainer.checkpoint as ckpt
    from recast.io import read_json, write_json

    run = tmp_path / "run"
    train(preset("ci", setting="quality", iterations=1), run)
    cfg_json = read_json(run / "config.json")
    assert cfg_json["lam"] == [] and cfg_json["_run"]["lam"] == pytest.approx([0.55, 0.15, 0.15, 0.15])
    Trainer(preset("ci", setting="quality", iterations=2), run, resume=True).release()  # nothing changed
    # a run made when quality's default budgets were equal: trained at 0.25 each, its config naming no lam
    train(preset("ci", setting="quality", lam=(0.25,) * 4, iterations=1), run, overwrite=True)
    cfg_json = read_json(run / "config.json")
    cfg_json["lam"] = []
    write_json(run / "config.json", cfg_json)
    state = ckpt.load_checkpoint(run)
    ckpt.save_checkpoint(run, {**state, "config": {**state["config"], "lam": []}})
    with pytest.raises(ValueError, match=r"trained the budgets \[0.25, 0.25, 0.25, 0.25\].*--lam 0.25,0.25,0.25"):
        Trainer(preset("ci", setting="quality", iterations=2), run, resume=True)
    tr = Trainer(preset("ci", setting="quality", lam=(0.25,) * 4, iterations=2), run, resume=True)
    assert tr.lam.tolist() == [0.25] * 4 and tr.iteration == 1
    tr.release()
    # a run made when the setting had other rewards
    cfg_json["_run"]["reward_names"] = ["sharpness", "clean", "contrast"]
    write_json(run / "config.json", cfg_json)
    with pytest.raises(ValueError, match="trained the rewards .*--rewards sharpness,clean,contrast"):
        Trainer(preset("ci", setting="quality", lam=(0.25,) * 4, iterations=2), run, resume=True)


def _tiny_inputs():
    from recast.worlds.digits.model import tiny_world

    w = tiny_world(0)
    torch.set_num_threads(1)
    embeds = w.encode_prompts(["a red small 3 at the top left"] * 2)
    x = torch.randn(2, *w.sample_shape, generator=torch.Generator().manual_seed(0))
    return w, embeds, x


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_policy_companions(lora_rank):
    from recast.sampling import predict_velocity
    from recast.trainer.policy import Policy, old_decay

    w, e, x = _tiny_inputs()

    def v(tr=None):
        with torch.no_grad():
            return predict_velocity(tr or w.transformer, x, 0.5, e)

    base = v()
    pol = Policy(w.transformer, lora_rank=lora_rank, lora_alpha=8.0, keep_ref=True)
    assert pol.lora == (lora_rank > 0) and pol.num_trainable > 0
    assert torch.equal(v(), base) or lora_rank == 0  # LoRA starts as the identity (B = 0)
    with torch.no_grad():
        for p in pol.params:
            p.add_(0.05 * torch.randn_like(p))
    moved = v()
    assert not torch.equal(moved, base)
    with pol.use("ref") as tr:
        torch.testing.assert_close(v(tr), base)
    with pol.use("old") as tr:
        torch.testing.assert_close(v(tr), base)
    assert torch.equal(v(), moved), "companions must be swapped out bit-exactly"
    # old <- d old + (1 - d) theta
    before = [o.clone() for o in pol.old]
    d = old_decay(300, 0.001, 0.5)
    assert d == 0.3 and old_decay(10_000) == 0.5
    pol.update_old(d)
    for o, b, p in zip(pol.old, before, pol.params):
        torch.testing.assert_close(o, d * b + (1 - d) * p.detach())
    # state round trip
    state = pol.state_dict()
    with torch.no_grad():
        for p in pol.params:
            p.zero_()
    pol.load_state_dict(state)
    assert torch.equal(v(), moved)


def test_full_finetune_with_kl_runs(tmp_path):
    run = train(preset("ci", iterations=1, lora_rank=0, kl_beta=0.1, rewards=("color",)), tmp_path)
    assert run.metrics[-1]["loss/kl"] >= 0


def test_grad_accum_gives_the_same_step(tmp_path):
    trainers = []
    for accum in (1, 2):
        tr = Trainer(preset("ci", iterations=1, grad_accum=accum, rewards=("color", "size"), method="recast_live"),
                     tmp_path / str(accum))
        tr.run()
        trainers.append(tr)
    for a, b in zip(*(t.policy.params for t in trainers)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    run = load_run(tmp_path / "1")
    assert run.W_at(1)[0] == 1 and run.D_at(1)[1].shape == (2, 5)

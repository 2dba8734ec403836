"""Trajectory replay: buffer semantics, recomputed advantages, priorities, the draw, config checks, equal-query
accounting, and bit-exact resume with a buffer."""

import io
import math

import pytest
import torch

from recast.config import preset
from recast.trainer import Trainer, load_run
from recast.advantages import STD_EPS, group_advantages
from recast.io import write_json
from recast.trainer.checkpoint import check_plain, check_resume_config
from recast.trainer.replay import (ReplayBuffer, draw, group_offsets, informativeness_weights, priorities,
                                   replay_count, restandardise)
from recast.trainer.validate import validate_config


def _batch(it, B=4, K=2):
    return [f"p{it}_{b}" for b in range(B)], torch.full((B, 1, 2, 2), float(it)), \
        torch.arange(K * B, dtype=torch.float32).reshape(K, B) + it, torch.zeros(K, B)


# ------------------------------------------------------------------ the buffer
def test_capacity_keeps_the_newest_records_in_order():
    buf = ReplayBuffer(capacity=6, max_age=10)
    for it in (1, 2, 3):
        buf.add(*_batch(it), iteration=it)
    assert len(buf) == 6
    assert buf.iteration.tolist() == [2, 2, 3, 3, 3, 3]
    assert buf.prompts == ["p2_2", "p2_3", "p3_0", "p3_1", "p3_2", "p3_3"]
    assert buf.x0[:, 0, 0, 0].tolist() == [2, 2, 3, 3, 3, 3] and buf.R.shape == buf.offset.shape == (2, 6)
    assert buf.R[0].tolist() == [4.0, 5.0, 3.0, 4.0, 5.0, 6.0]  # row 0 of each batch: arange(4) + it


def test_records_age_out_after_max_age_iterations():
    buf = ReplayBuffer(capacity=100, max_age=2)
    for it in (1, 2, 3):
        buf.add(*_batch(it), iteration=it)
    assert buf.expire(3) == 0 and buf.ages(3).tolist() == [2] * 4 + [1] * 4 + [0] * 4
    assert buf.expire(4) == 4  # drawn at 1: age 3 > 2
    assert sorted(set(buf.iteration.tolist())) == [2, 3] and buf.ages(4).max() == 2
    assert buf.expire(6) == 8 and len(buf) == 0 and buf.expire(7) == 0


def test_buffer_rejects_bad_settings_and_shapes():
    with pytest.raises(ValueError, match="replay_capacity >= 1"):
        ReplayBuffer(capacity=0, max_age=1)
    with pytest.raises(ValueError, match="replay_max_age >= 1"):
        ReplayBuffer(capacity=1, max_age=0)
    p, x0, R, off = _batch(1)
    with pytest.raises(ValueError, match="B=4 prompts"):
        ReplayBuffer(8, 2).add(p[:3], x0, R, off, iteration=1)


def test_state_round_trips_through_a_weights_only_load():
    buf = ReplayBuffer(capacity=6, max_age=3)
    for it in (1, 2):
        buf.add(*_batch(it), iteration=it)
    state = buf.state_dict()
    check_plain(state)
    raw = io.BytesIO()
    torch.save(state, raw)
    raw.seek(0)
    back = ReplayBuffer(capacity=6, max_age=3)
    back.load_state_dict(torch.load(raw, weights_only=True))
    assert back.prompts == buf.prompts
    for name in ("x0", "R", "offset", "iteration"):
        assert torch.equal(getattr(back, name), getattr(buf, name)), name


# ------------------------------------------------------------------ recomputed advantages
def test_offsets_are_group_mean_minus_batch_mean():
    R = torch.tensor([[0.0, 2.0, 4.0, 6.0], [1.0, 1.0, 3.0, 5.0]])
    assert torch.allclose(group_offsets(R, 2), torch.tensor([[-2.0, -2.0, 2.0, 2.0], [-1.5, -1.5, 1.5, 1.5]]))


def test_restandardise_matches_a_closed_form_value():
    R_now = torch.tensor([[0.0, 2.0, 4.0, 6.0]])  # batch mean 3, population std sqrt(5), group stds 1 and 1
    R, off = torch.tensor([[5.0, 100.0]]), torch.tensor([[1.0, 0.0]])
    adv = restandardise(R, off, R_now, 2, adv_clip_max=5.0)
    A0 = (5.0 - (3.0 + 1.0)) / (math.sqrt(5.0) + STD_EPS)
    assert adv.A[0, 0].item() == pytest.approx(A0, rel=1e-6) and adv.A[0, 1].item() == 5.0  # clipped at c
    assert adv.p[0, 0].item() == pytest.approx(0.5 + A0 / 10, rel=1e-6)
    assert adv.mean.tolist() == [[4.0, 3.0]]
    grp = restandardise(R, off, R_now, 2, adv_clip_max=5.0, std_scope="group")
    assert grp.A[0, 0].item() == pytest.approx(1.0 / (1.0 + STD_EPS), rel=1e-6)
    quiet = restandardise(R, off, R_now, 2, adv_clip_max=5.0, silenced=torch.tensor([True]))
    assert quiet.A.eq(0).all() and quiet.p.eq(0.5).all()


def test_the_policy_improving_makes_an_old_sample_less_good():
    # the same stored sample, against a batch whose rewards rose by 1: its advantage falls by 1 / std
    R_then = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    off = group_offsets(R_then, 2)
    a = restandardise(R_then, off, R_then, 2, adv_clip_max=5.0).A
    b = restandardise(R_then, off, R_then + 1.0, 2, adv_clip_max=5.0).A
    std = R_then.std(unbiased=False).item() + STD_EPS
    assert torch.allclose(a - b, torch.full_like(a, 1.0 / std), atol=1e-6)


def test_fresh_samples_against_their_own_batch_get_their_group_advantages():
    R = torch.rand(3, 12, generator=torch.Generator().manual_seed(0))
    mine = restandardise(R, group_offsets(R, 4), R, 4, adv_clip_max=2.0)
    fresh = group_advantages(R, 4, adv_clip_max=2.0)
    assert torch.allclose(mine.A, fresh.A, atol=1e-5) and torch.allclose(mine.p, fresh.p, atol=1e-6)


# ------------------------------------------------------------------ priorities and the draw
def test_each_priority_matches_its_definition():
    A = torch.tensor([[1.0, -2.0, 0.0], [0.5, 0.0, -4.0]])
    ages = torch.tensor([1, 2, 4])
    lam = torch.tensor([0.75, 0.25], dtype=torch.float64)
    assert priorities("recency", A, ages, lam).tolist() == [1.0, 0.5, 0.25]
    assert priorities("advantage", A, ages, lam).tolist() == pytest.approx([0.875, 1.5, 1.0])
    gains = torch.tensor([[0.0, 0.1, 0.1, 5.0], [0.2, 0.2, 0.1, 0.0]], dtype=torch.float64)  # column 3 untrained
    w = informativeness_weights(lam, gains, trained_columns=3)
    assert w.tolist() == pytest.approx([0.75 * 0.2 / (0.75 * 0.2 + 0.25 * 0.5), 0.25 * 0.5 / (0.15 + 0.125)])
    assert priorities("informativeness", A, ages, w).tolist() == pytest.approx(
        [float(w[0] + w[1] * 0.5), float(w[0] * 2), float(w[1] * 4)])
    assert informativeness_weights(lam, None, 3).tolist() == lam.tolist()  # tracker not ready: the budgets
    assert informativeness_weights(lam, torch.zeros(2, 4), 3).tolist() == lam.tolist()
    with pytest.raises(ValueError, match="unknown replay priority"):
        priorities("loudest", A, ages, lam)


def test_draw_is_deterministic_distinct_and_follows_priority():
    prio = torch.tensor([0.0, 1.0, 1.0, 8.0, 0.0])
    a = draw(prio, 2, torch.Generator().manual_seed(3))
    assert torch.equal(a, draw(prio, 2, torch.Generator().manual_seed(3)))
    g = torch.Generator().manual_seed(0)
    picks = [draw(prio, 3, g) for _ in range(50)]
    assert all(p.unique().numel() == 3 and torch.equal(p, p.sort().values) for p in picks)
    assert all(set(p.tolist()) == {1, 2, 3} for p in picks)  # zero-priority samples come last
    ones = [draw(prio, 1, g).item() for _ in range(200)]
    assert 0.7 < ones.count(3) / 200 < 0.95  # P = 8 / 10
    assert draw(prio, 9, g).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="finite"):
        draw(torch.tensor([1.0, float("nan")]), 1, g)


def test_replay_count_rounds_share_times_batch():
    assert [replay_count(s, 16) for s in (0.0, 0.01, 0.5, 1.0, 2.0)] == [0, 0, 8, 16, 32]


# ------------------------------------------------------------------ config checks (before any compute)
@pytest.mark.parametrize("over, match", [
    (dict(backend="grpo", replay_share=0.5), r"replay_share.*grpo.*log-probs of the\s+policy that drew them"),
    (dict(replay_share=-0.5), "replay_share >= 0"),
    (dict(replay_share=0.5, replay_priority="loudest"), "unknown replay_priority 'loudest'"),
    (dict(replay_priority="loudest"), "unknown replay_priority"),
    (dict(replay_share=0.5, method="uniform", replay_priority="informativeness"), "only method='recast_live'"),
    (dict(replay_share=0.1, method="uniform"), "rounds to 0 replayed samples"),
    (dict(replay_share=2.0, replay_capacity=4, method="uniform"), "replay_capacity: 4 is smaller than the 8 samples"),
    (dict(replay_share=0.5), r"'pre' aggregation of method 'static'.*per_reward"),
    (dict(replay_max_age=0), "replay_max_age >= 1"),
    (dict(replay_capacity=0), "replay_capacity >= 1"),
])
def test_bad_replay_configs_are_refused(over, match):
    with pytest.raises(ValueError, match=match):
        validate_config(preset("ci", **over))


def test_grpo_trainer_refuses_replay_before_touching_the_run_dir(tmp_path):
    with pytest.raises(ValueError, match="replay_share"):
        Trainer(preset("ci", backend="grpo", replay_share=1.0), tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ the trainer
def _cfg(**over):
    return preset("ci", **{**dict(rewards=("color", "size"), train_columns=2, replay_share=1.0, replay_capacity=8,
                                  replay_max_age=2, method="recast_live"), **over})


def _strip(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_replayed_samples_cost_no_reward_queries(tmp_path):
    tr = Trainer(_cfg(replay_priority="informativeness"), tmp_path / "run")
    scored = [0]

    def counting(fn):
        def wrapped(images, prompts):
            scored[0] += images.shape[0]
            return fn(images, prompts)
        return wrapped

    tr.rewards = [counting(tr.rewards[0])] + tr.rewards[1:]
    recs = [tr.step() for _ in range(3)]
    tr.release()
    B = tr.cfg.B
    assert [r["reward_queries"] for r in recs] == [B, 2 * B, 3 * B]
    assert [r["replay/fraction"] for r in recs] == [0.0, 0.5, 0.5]  # buffer empty at the first iteration
    assert scored[0] == recs[-1]["reward_queries"] + recs[-1]["reward_queries_proxy"]
    assert recs[-1]["reward_queries_proxy"] > 0


def test_turning_replay_on_does_not_move_the_fresh_stream(tmp_path):
    on = Trainer(_cfg(iterations=1), tmp_path / "on").run()
    off = Trainer(_cfg(iterations=1, replay_share=0.0), tmp_path / "off").run()
    assert _strip(off.metrics) == [{k: v for k, v in r.items() if not k.startswith(("replay/expired", "replay/buffer",
                                   "replay/mean_age"))} for r in _strip(on.metrics)]
    assert off.metrics[0]["reward_queries"] == on.metrics[0]["reward_queries"] == 4


@pytest.mark.parametrize("method, priority", [("recast_live", "informativeness"), ("reward_sum", "advantage")])
def test_resume_with_replay_is_bit_exact(tmp_path, method, priority):
    # half a batch replayed: the draw at iteration 2 already uses the replay generator, whose state must be saved
    cfg = _cfg(iterations=4, replay_share=0.5, method=method, replay_priority=priority, kl_beta=0.1)
    straight = Trainer(cfg, tmp_path / "straight")
    straight.run()
    Trainer(cfg.replace(iterations=2), tmp_path / "split").run()
    second = Trainer(cfg, tmp_path / "split", resume=True)
    assert second.iteration == 2 and len(second.replay) == 8
    second.run()
    for name in ("params", "old", "ema"):
        for a, b in zip(getattr(straight.policy, name), getattr(second.policy, name)):
            assert torch.equal(a, b), name
    assert torch.equal(straight.W, second.W)
    assert straight.replay.prompts == second.replay.prompts
    for name in ("x0", "R", "offset", "iteration"):
        assert torch.equal(getattr(straight.replay, name), getattr(second.replay, name)), name
    assert straight.replay_gen.get_state().equal(second.replay_gen.get_state())
    a, b = load_run(tmp_path / "straight"), load_run(tmp_path / "split")
    assert _strip(a.metrics) == _strip(b.metrics) and a.weights == b.weights
    assert [r["replay/fraction"] for r in a.metrics] == [0.0, 1 / 3, 1 / 3, 1 / 3]


def test_runs_made_before_replay_still_resume(tmp_path):
    cfg = preset("ci")
    saved = {k: v for k, v in cfg.to_dict().items() if not k.startswith("replay_")}  # a config.json from before
    write_json(tmp_path / "config.json", saved)
    check_resume_config(tmp_path, cfg.to_dict())
    with pytest.raises(ValueError, match="replay_share: config.json 0.0 vs now 1.0"):
        check_resume_config(tmp_path, cfg.replace(replay_share=1.0).to_dict())

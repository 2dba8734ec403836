"""Pretraining: deterministic under a seed, a short run is a prefix of a longer one, the loss goes down."""

import torch

from recast.worlds.digits.pretrain import PretrainConfig, pretrain, sample_sigmas

TINY = dict(preset="tiny", batch_size=8, num_threads=1, warmup_steps=2, decay_steps=0, log_every=1, progress=False)


def _weights(world):
    sd = {**world.transformer.state_dict(), **{f"te.{k}": v for k, v in world.text_encoder.state_dict().items()}}
    return {k: v.clone() for k, v in sd.items()}


def test_pretrain_is_deterministic_and_prefix_consistent():
    snapshots = {}
    long, history = pretrain(PretrainConfig(steps=6, **TINY),
                             callback=lambda step, w: snapshots.setdefault(step, _weights(w)) if step == 4 else None)
    again, _ = pretrain(PretrainConfig(steps=6, **TINY))
    short, _ = pretrain(PretrainConfig(steps=4, **TINY))
    a, b, s = _weights(long), _weights(again), _weights(short)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(s[k], snapshots[4][k]) for k in s)  # constant lr after warm-up: N steps = prefix
    assert history.step == list(range(1, 7)) and len(history.loss) == 6
    assert history.config["steps"] == 6 and history.wall_time_s > 0
    assert not long.transformer.training


def test_loss_decreases_on_tiny_world():
    _, history = pretrain(PretrainConfig(steps=40, lr=3e-3, ema_decay=0.0, **TINY))
    assert sum(history.loss[-5:]) / 5 < sum(history.loss[:5]) / 5


def test_sigma_sampling_in_unit_interval():
    g = torch.Generator().manual_seed(0)
    for how in ("logit_normal", "uniform"):
        s = sample_sigmas(1000, how, g)
        assert ((s > 0) & (s < 1)).all()
    assert abs(sample_sigmas(20000, "logit_normal", g).median().item() - 0.5) < 0.02


def test_lr_schedule_warms_up_holds_and_cools_down():
    from recast.worlds.digits.pretrain import _lr_factor

    cfg = PretrainConfig(steps=100, warmup_steps=10, decay_steps=40)
    f = [_lr_factor(s, cfg) for s in range(100)]
    assert f[0] == 0.1 and f[9] == 1.0 and f[59] == 1.0
    assert all(a >= b for a, b in zip(f[59:], f[60:])) and f[99] < 1e-12
    assert _lr_factor(99, PretrainConfig(steps=100, warmup_steps=10, decay_steps=0)) == 1.0


def test_the_tile_reaches_the_training_canvases_and_a_bad_tile_fails_before_any_compute(tmp_path, monkeypatch):
    """``PretrainConfig.tile`` changes the canvases the model is fitted on (so the weights), is recorded in the
    history, and ``--tile`` outside [0, 1) is refused by the command line before a world is built."""
    import pytest

    import recast.worlds.digits.pretrain as pt

    plain, _ = pretrain(PretrainConfig(steps=2, **TINY))
    tiled, history = pretrain(PretrainConfig(steps=2, tile=0.3, **TINY))
    a, b = _weights(plain), _weights(tiled)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    assert history.config["tile"] == 0.3
    monkeypatch.setattr(pt, "pretrain", lambda *a, **k: pytest.fail("trained despite a bad --tile"))
    for bad in ("1.0", "-0.2"):
        with pytest.raises(SystemExit):
            pt.main(["--tile", bad, "--out", str(tmp_path / "w")])

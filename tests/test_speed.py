"""The throughput switches (`recast.trainer.speed`) change no result beyond float round-off: the same rollouts, loss
and gradients on the tiny SD3 pipeline (issue 49's CPU half; the speed itself is measured on a GPU)."""

import pytest
import torch

from recast.config import preset

TOL = dict(rtol=1e-4, atol=1e-5)


def _one_step(tmp_path, **over):
    """One NFT iteration of the tiny SD3 world: the rollouts, the loss and the LoRA gradient (before the step)."""
    from recast.trainer import Trainer

    tr = Trainer(preset("ci", world="sd3-tiny", rewards=("jpeg", "colour_entropy"), **over), tmp_path)
    try:
        torch.manual_seed(0)
        ro = tr.rollout()
        R = tr.score(ro.x0, ro.prompts)
        batch = tr.credit.normalise(R, torch.arange(R.shape[1]) // tr.cfg.group_size)
        from recast.trainer.backends import nft_optimise
        from recast.trainer.speed import sdpa_context

        with sdpa_context(tr.cfg.sdpa_backend):
            out = nft_optimise(tr.model, tr.policy, ro, batch.S, tr.sigmas, tr.cfg, tr.gen, tr.acc, None)
        grads = [p.grad.detach().clone() for p in tr.policy.params]
        base = {n: p.detach().clone() for n, p in tr.world.transformer.named_parameters() if "lora_" not in n}
        return ro.x0, out.parts["loss"], grads, base
    finally:
        tr.release()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return _one_step(tmp_path_factory.mktemp("ref"))


@pytest.mark.parametrize("over", [dict(sdpa_backend="math"), dict(lora_merge_rollouts=True)])
def test_a_switch_gives_the_same_rollouts_loss_and_gradients(tmp_path, reference, over):
    x0, loss, grads, base = _one_step(tmp_path, **over)
    torch.testing.assert_close(x0, reference[0], **TOL)
    assert loss == pytest.approx(reference[1], rel=1e-4)
    for g, h in zip(grads, reference[2]):
        torch.testing.assert_close(g, h, **TOL)
    assert all(torch.equal(base[n], reference[3][n]) for n in base)  # a merged rollout restores the base exactly


def test_merging_lora_for_a_pass_restores_every_base_weight_bit_for_bit():
    from recast.sampling import predict_velocity
    from recast.trainer.policy import Policy
    from recast.trainer.speed import merged_lora
    from recast.worlds.sd3.tiny import tiny_sd3_world

    world = tiny_sd3_world()
    pol = Policy(world.transformer, lora_rank=4, lora_alpha=8.0, seed=0)
    with torch.no_grad():
        for p in pol.params:  # a non-zero adapter, so merging changes the weights
            p.add_(0.05 * torch.randn_like(p))
    before = {n: p.detach().clone() for n, p in world.transformer.named_parameters()}
    x = torch.randn(2, *world.sample_shape, generator=torch.Generator().manual_seed(0))
    e = world.encode_prompts(["a red circle", "two dogs"])
    with torch.no_grad():
        want = predict_velocity(world.transformer, x, 0.5, e)
        with merged_lora(world.transformer) as m:
            got = predict_velocity(m, x, 0.5, e)
    torch.testing.assert_close(got, want, **TOL)
    assert all(torch.equal(p, before[n]) for n, p in world.transformer.named_parameters())


@pytest.mark.slow
def test_regional_compile_gives_the_same_loss_and_gradients(tmp_path, reference):
    x0, loss, grads, _ = _one_step(tmp_path, compile_blocks=True)
    torch.testing.assert_close(x0, reference[0], **TOL)
    assert loss == pytest.approx(reference[1], rel=1e-4)
    for g, h in zip(grads, reference[2]):
        torch.testing.assert_close(g, h, **TOL)


def test_unknown_switch_values_are_refused(tmp_path):
    from recast.trainer import Trainer

    with pytest.raises(ValueError, match="sdpa_backend"):
        Trainer(preset("ci", sdpa_backend="fastest"), tmp_path)
    with pytest.raises(ValueError, match="lora_merge_rollouts"):
        Trainer(preset("ci", lora_merge_rollouts=True, lora_rank=0), tmp_path)

"""The throughput switches of issue 62 (`recast.trainer.speed`): a merged copy for the old-policy passes, LoRA input
kept in bf16, partial activation recompute, and regional compile that never falls back to eager. Each gives the same
rollouts, loss and gradients as the plain trainer on the tiny SD3 world (the speed itself is measured on a GPU)."""

import pytest
import torch

from recast.config import preset

TOL = dict(rtol=1e-4, atol=1e-5)


def _perturb(policy, seed: int = 0) -> None:
    """A non-zero adapter whose old policy differs from the trained one, so a pass that reads the wrong one shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p, o in zip(policy.params, policy.old):
            p.add_(0.2 * torch.randn(p.shape, generator=g))
            o.add_(0.2 * torch.randn(o.shape, generator=g))


def _trainer(cfg, tmp_path):
    """A Trainer whose accelerate state is made afresh (a process keeps one mixed precision otherwise)."""
    from accelerate.state import AcceleratorState

    from recast.trainer import Trainer

    AcceleratorState._reset_state(True)
    return Trainer(cfg, tmp_path)


def _one_step(tmp_path, **over):
    """One NFT iteration of the tiny SD3 world with the switches applied as `apply_switches` does for the loop."""
    from accelerate.state import AcceleratorState

    from recast.trainer.backends import nft_optimise
    from recast.trainer.speed import apply_switches, sdpa_context

    cfg = preset("ci", world="sd3-tiny", rewards=("jpeg", "colour_entropy"), kl_beta=0.1, **over)
    tr = _trainer(cfg, tmp_path)
    try:
        _perturb(tr.policy)
        if hasattr(tr.policy, "refresh"):  # the loop wrapped it already: its merged copy predates the perturbation
            tr.policy.refresh()
        tr.policy = apply_switches(cfg, tr.world.transformer, tr.policy, backend="eager")
        torch.manual_seed(0)
        ro = tr.rollout()
        R = tr.score(ro.x0, ro.prompts)
        batch = tr.credit.normalise(R, torch.arange(R.shape[1]) // cfg.group_size)
        with sdpa_context(cfg.sdpa_backend):
            out = nft_optimise(tr.model, tr.policy, ro, batch.S, tr.sigmas, cfg, tr.gen, tr.acc, None)
        grads = [p.grad.detach().clone() for p in tr.policy.params]
        base = {n: p.detach().clone() for n, p in tr.world.transformer.named_parameters() if "lora_" not in n}
        return ro.x0, out.parts["loss"], grads, base
    finally:
        tr.release()
        AcceleratorState._reset_state(True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return {mp: _one_step(tmp_path_factory.mktemp(mp), mixed_precision=mp) for mp in ("no", "bf16")}


@pytest.mark.parametrize("over,exact", [
    (dict(lora_bf16=True, mixed_precision="bf16"), True),  # the fp32 copy round-trips exactly: no bit changes
    (dict(recompute_blocks=1), True),  # recompute repeats the same ops
    (dict(recompute_blocks=2), True),
    (dict(lora_merged_old=True), False),  # base + delta rounded once: equal to round-off
    (dict(lora_merged_old=True, lora_bf16=True, recompute_blocks=1, mixed_precision="bf16"), False),
])
def test_a_switch_gives_the_same_rollouts_loss_and_gradients(tmp_path, reference, over, exact):
    x0, loss, grads, base = _one_step(tmp_path, **{"mixed_precision": "no", **over})
    ref = reference[over.get("mixed_precision", "no")]
    if exact:
        assert torch.equal(x0, ref[0]) and loss == ref[1]
        assert all(torch.equal(g, h) for g, h in zip(grads, ref[2]))
    elif over.get("mixed_precision") != "bf16":
        torch.testing.assert_close(x0, ref[0], **TOL)
        assert loss == pytest.approx(ref[1], rel=1e-4)
        for g, h in zip(grads, ref[2]):
            torch.testing.assert_close(g, h, **TOL)
    else:  # merged weights under bf16 autocast round once more: a few bf16 ulps, against ~0.1 mean and ~100 %
        # relative gradient error when the old policy is mistaken for the trained one
        assert (x0 - ref[0]).abs().mean() < 1e-2 and loss == pytest.approx(ref[1], rel=1e-3)
        assert all((g - h).norm() <= 0.1 * h.norm() + 1e-8 for g, h in zip(grads, ref[2]))  # some are 0
    assert all(torch.equal(base[n], ref[3][n]) for n in base)  # the base weights are back, bit for bit


def test_recompute_blocks_recomputes_only_the_first_n_blocks():
    from recast.sampling import predict_velocity
    from recast.trainer.speed import recompute_blocks
    from recast.worlds.sd3.tiny import tiny_sd3_world

    world = tiny_sd3_world()
    tr = world.transformer
    calls = [0] * len(tr.transformer_blocks)
    for i, b in enumerate(tr.transformer_blocks):
        b.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))  # recompute stops early
    x = torch.randn(2, *world.sample_shape, requires_grad=True)
    e = world.encode_prompts(["a red circle", "two dogs"])
    for n, want in ((0, [1, 1]), (1, [2, 1]), (2, [2, 2])):
        recompute_blocks(tr, n)
        calls[:] = [0, 0]
        predict_velocity(tr, x, 0.5, e).square().mean().backward()
        assert calls == want, n
        calls[:] = [0, 0]
        with torch.no_grad():  # no backward, no recompute
            predict_velocity(tr, x, 0.5, e)
        assert calls == [1, 1]
    with pytest.raises(ValueError, match="recompute_blocks"):
        recompute_blocks(tr, 3)


def test_applying_the_switches_twice_changes_nothing_more():
    from recast.trainer.policy import Policy
    from recast.trainer.speed import MergedOld, apply_switches
    from recast.worlds.sd3.tiny import tiny_sd3_world

    world = tiny_sd3_world()
    pol = Policy(world.transformer, lora_rank=4, lora_alpha=8.0, seed=0)
    cfg = preset("ci", lora_merged_old=True, recompute_blocks=1)
    once = apply_switches(cfg, world.transformer, pol)
    assert isinstance(once, MergedOld) and apply_switches(cfg, world.transformer, once) is once
    assert apply_switches(preset("ci"), world.transformer, pol) is pol  # all off: the policy as it was


def test_the_merged_copy_runs_the_old_policy_and_follows_its_updates():
    from recast.sampling import predict_velocity
    from recast.trainer.policy import Policy
    from recast.trainer.speed import MergedOld
    from recast.worlds.sd3.tiny import tiny_sd3_world

    world = tiny_sd3_world()
    pol = Policy(world.transformer, lora_rank=4, lora_alpha=8.0, seed=0)
    _perturb(pol)
    merged = MergedOld(pol)
    x = torch.randn(2, *world.sample_shape, generator=torch.Generator().manual_seed(0))
    e = world.encode_prompts(["a red circle", "two dogs"])
    before = {n: p.detach().clone() for n, p in world.transformer.named_parameters()}

    def v(ctx):
        with torch.no_grad(), ctx as t:
            return predict_velocity(t, x, 0.5, e)

    old, new = v(pol.use("old")), predict_velocity(world.transformer, x, 0.5, e).detach()
    assert (old - new).abs().max() > 1e-3  # the old and trained policies differ here
    torch.testing.assert_close(v(merged.use("old")), old, **TOL)
    torch.testing.assert_close(v(merged.use("ema")), v(pol.use("ema")), rtol=0, atol=0)  # other uses: the policy's
    merged.update_old(0.25)  # old <- 0.25 old + 0.75 trained, and the copy follows
    torch.testing.assert_close(v(merged.use("old")), v(pol.use("old")), **TOL)
    assert all(torch.equal(p, before[n]) for n, p in world.transformer.named_parameters() if "lora_" not in n)
    assert merged.params is pol.params and merged.num_trainable == pol.num_trainable
    with pytest.raises(ValueError, match="lora_merged_old"):
        MergedOld(Policy(tiny_sd3_world().transformer, lora_rank=0))


@pytest.mark.parametrize("over,field", [
    (dict(lora_bf16=True), "lora_bf16"),  # no autocast
    (dict(lora_merged_old=True, lora_rank=0), "lora_merged_old"),
    (dict(lora_merged_old=True, lora_merge_rollouts=True), "lora_merged_old"),
    (dict(recompute_blocks=-2), "recompute_blocks"),
    (dict(sdpa_backend="fastest"), "sdpa_backend"),
])
def test_a_switch_that_cannot_run_is_refused_naming_its_field(over, field):
    from recast.trainer.speed import check_switches

    with pytest.raises(ValueError, match=field):
        check_switches(preset("ci", mixed_precision="no", **over))


def _three_kind_world():
    """A tiny SD3 transformer with SD3.5-Medium's three block kinds (dual attention, plain, context-pre-only last)."""
    from diffusers import SD3Transformer2DModel

    from recast.trainer.policy import Policy
    from recast.worlds.sd3.tiny import tiny_sd3_world

    world = tiny_sd3_world()
    c = dict(world.transformer.config)
    torch.manual_seed(0)
    tr = SD3Transformer2DModel(**{k: c[k] for k in (
        "sample_size", "patch_size", "in_channels", "out_channels", "attention_head_dim", "num_attention_heads",
        "joint_attention_dim", "caption_projection_dim", "pooled_projection_dim", "pos_embed_max_size", "qk_norm")},
        num_layers=3, dual_attention_layers=(0,))
    return world, tr, Policy(tr, lora_rank=4, lora_alpha=8.0, seed=0)


def _trainer_passes(world, tr, policy):
    """Every kind of pass the trainer makes, under bf16 autocast as at SD3.5 scale: rollouts of the whole batch,
    old-policy and reference passes and trained forward/backward over micro-batches of varying size, merged
    rollouts."""
    from recast.sampling import PromptEmbeds, predict_velocity
    from recast.trainer.speed import merged_lora

    e = world.encode_prompts(["a red circle"] * 5)
    x = torch.randn(5, *world.sample_shape)

    def sub(n):
        return PromptEmbeds(e.encoder_hidden_states[:n], e.pooled_projections[:n])

    with torch.autocast("cpu", torch.bfloat16):
        with torch.no_grad(), policy.use("old") as t:
            predict_velocity(t, x, 0.9, sub(5))
        for n in (3, 2):
            with torch.no_grad():
                for which in ("old", "ref"):
                    with policy.use(which) as t:
                        predict_velocity(t, x[:n], 0.5, sub(n))
            predict_velocity(tr, x[:n], 0.5, sub(n)).float().square().mean().backward()
        with torch.no_grad(), policy.use("old") as t, merged_lora(t) as m:
            predict_velocity(m, x, 0.9, sub(5))


def test_compile_blocks_raises_the_recompile_limit_to_the_variants_of_each_block_kind():
    from recast.trainer.speed import VARIANTS_PER_KIND, block_kinds, compile_blocks, recompile_limit

    world, tr, _ = _three_kind_world()
    with torch._dynamo.config.patch(recompile_limit=8):
        assert compile_blocks(tr, backend="eager") == 3 and recompile_limit() == 3 * VARIANTS_PER_KIND
        assert all(b._compiled_call_impl is not None for b in tr.transformer_blocks)
    with torch._dynamo.config.patch(recompile_limit=500):  # a higher limit is kept
        compile_blocks(tr, backend="eager")
        assert recompile_limit() == 500
    assert block_kinds(world.transformer) == 2  # the tiny world: dual attention, then the context-pre-only block


@pytest.mark.slow
def test_regional_compile_keeps_every_pass_compiled_where_the_default_limit_falls_back():
    """The count of graph variants stays within the raised limit and no call runs eagerly; with dynamo's default
    limit (8) the same passes on the same model fall back (the failure this guards against)."""
    from torch._dynamo.exc import FailOnRecompileLimitHit
    from torch._dynamo.testing import CompileCounter

    from recast.trainer.speed import VARIANTS_PER_KIND, block_kinds, compile_blocks, recompile_limit

    world, tr, policy = _three_kind_world()
    assert block_kinds(tr) == 3
    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=8):
        counter = CompileCounter()
        compile_blocks(tr, backend=counter)
        assert recompile_limit() == 3 * VARIANTS_PER_KIND
        _trainer_passes(world, tr, policy)
        graphs = counter.frame_count
    assert 8 < graphs <= 3 * VARIANTS_PER_KIND  # more variants than the default limit, all compiled
    world, tr, policy = _three_kind_world()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=8):
        for block in tr.transformer_blocks:  # compiled as before this issue: the default limit stays
            block.compile(backend=CompileCounter())
        with pytest.raises(FailOnRecompileLimitHit):
            _trainer_passes(world, tr, policy)
    torch._dynamo.reset()


@pytest.mark.slow
def test_the_trainer_with_every_switch_compiles_every_pass(tmp_path, monkeypatch):
    """Two iterations of the real loop (rollouts, old-policy, reference and trained passes over micro-batches of
    varying size, bf16 autocast) with regional compile and the other switches: no call falls back to eager."""
    from torch._dynamo.testing import CompileCounter

    from accelerate.state import AcceleratorState

    import recast.trainer.loop as loop
    import recast.trainer.speed as speed
    from recast.trainer.speed import apply_switches, compile_blocks

    counter = CompileCounter()
    def counted(transformer, backend=None):
        return compile_blocks(transformer, backend=counter)

    for mod in (loop, speed):  # wherever the loop reaches compile_blocks from
        monkeypatch.setattr(mod, "compile_blocks", counted, raising=False)
    cfg = preset("ci", world="sd3-tiny", rewards=("jpeg", "colour_entropy"), kl_beta=0.1, mixed_precision="bf16",
                 compile_blocks=True, lora_merged_old=True, lora_bf16=True, recompute_blocks=1, grad_accum=3,
                 prompts_per_iter=3, iterations=2)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=8):
        tr = _trainer(cfg, tmp_path)
        try:
            tr.policy = apply_switches(cfg, tr.world.transformer, tr.policy, backend=counter)
            for _ in range(2):
                tr.step()
        finally:
            tr.release()
            AcceleratorState._reset_state(True)
    assert counter.frame_count > 0
    torch._dynamo.reset()


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
def test_a_pinned_attention_kernel_matches_the_math_kernel_on_cuda(backend):
    """On CUDA in bf16 each fused kernel gives the math kernel's velocities and LoRA gradients to bf16 round-off
    (a kernel the card or build lacks is skipped with its reason)."""
    from recast.sampling import predict_velocity
    from recast.trainer.policy import Policy
    from recast.trainer.speed import sdpa_context
    from recast.worlds.sd3.tiny import tiny_sd3_world

    world = tiny_sd3_world().to("cuda")
    pol = Policy(world.transformer, lora_rank=4, lora_alpha=8.0, seed=0)
    _perturb(pol)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, *world.sample_shape, generator=g).cuda()
    e = world.encode_prompts(["a red circle", "two dogs", "a sign that says open", "a cat"])

    def run(kernel):
        for p in pol.params:
            p.grad = None
        with torch.autocast("cuda", torch.bfloat16), sdpa_context(kernel):
            v = predict_velocity(world.transformer, x, 0.5, e).float()
        v.square().mean().backward()
        return v.detach(), [p.grad.clone() for p in pol.params if p.grad is not None]

    want = run("math")
    try:
        got = run(backend)
    except RuntimeError as err:
        pytest.skip(f"sdpa {backend} unavailable here: {str(err).splitlines()[0][:120]}")
    assert (got[0] - want[0]).abs().mean() < 1e-2 * want[0].abs().mean()
    assert all((a - b).norm() <= 0.05 * b.norm() + 1e-8 for a, b in zip(got[1], want[1]))

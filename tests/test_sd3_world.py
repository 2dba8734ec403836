"""The SD3 world on a tiny random StableDiffusion3Pipeline: real loader, text cache, VAE, CFG, LoRA, NFT/GRPO steps."""

import pytest
import torch

from recast.sampling import predict_velocity, sample_ode, sample_sde, sde_step, sigma_schedule
from recast.trainer.losses import grpo_loss, nft_loss
from recast.world import World, load_world
from recast.trainer.policy import Policy
from recast.worlds.sd3 import lora as L
from recast.worlds.sd3.tiny import TINY_RESOLUTION, save_tiny_pipeline
from recast.worlds.sd3.world import SD3Settings

SETTINGS = SD3Settings(resolution=TINY_RESOLUTION, max_sequence_length=16, dtype="float32")
PROMPTS = ["a photo of a red cat", "two dogs", "a photo of a red cat", "two dogs"]


@pytest.fixture(scope="module")
def pipe_dir(tmp_path_factory):
    return save_tiny_pipeline(tmp_path_factory.mktemp("sd3") / "tiny")


@pytest.fixture()
def world(pipe_dir):
    return load_world(f"sd3:{pipe_dir}", settings=SETTINGS)


def test_saved_tiny_pipeline_loads_through_the_real_loader(world, pipe_dir):
    assert isinstance(world, World)
    assert (pipe_dir / "model_index.json").is_file() and (pipe_dir / "tokenizer_3" / "tokenizer.json").is_file()
    assert world.sample_shape == (16, TINY_RESOLUTION // 2, TINY_RESOLUTION // 2)
    assert tuple(world.transformer.config.dual_attention_layers) == (0,)
    assert not any(p.requires_grad for p in world.pipe.text_encoder_3.parameters())
    assert world.prompts("test")[0].startswith("a photo of") and len(world.prompts("train")) == 48
    with pytest.raises(ValueError, match="prompt_files"):
        world.prompts("val")


def test_missing_or_wrong_folders_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such path"):
        load_world(f"sd3:{tmp_path / 'absent'}")
    with pytest.raises(FileNotFoundError, match="model_index.json"):
        load_world(f"sd3:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="downloads are off"):  # a hub id, offline: no network touched
        load_world("sd3:nobody-here/not-a-model", settings=SETTINGS, allow_download=False)
    with pytest.raises(ValueError, match="SD3Settings.dtype"):
        SD3Settings(dtype="float8")


def test_text_cache_matches_the_pipeline_and_encodes_each_prompt_once(world, monkeypatch):
    e = world.encode_prompts(PROMPTS)
    assert e.encoder_hidden_states.shape == (4, 16 + 16, 32) and e.pooled_projections.shape == (4, 32)
    ref = world.pipe.encode_prompt(PROMPTS[:2], None, None, device="cpu", do_classifier_free_guidance=False,
                                   max_sequence_length=16)
    torch.testing.assert_close(e.encoder_hidden_states[:2], ref[0])
    torch.testing.assert_close(e.pooled_projections[2:], ref[2])
    monkeypatch.setattr(world.pipe, "encode_prompt", lambda *a, **k: pytest.fail("cache miss"))
    world.encode_prompts(PROMPTS[::-1])


def test_vae_round_trip_uses_scaling_and_shift(world):
    x = torch.randn(2, *world.sample_shape, generator=torch.Generator().manual_seed(0))
    images = world.decode(x)
    assert images.shape == (2, 3, TINY_RESOLUTION, TINY_RESOLUTION) and 0 <= images.min() and images.max() <= 1
    vae = world.pipe.vae
    z = vae.encode(images * 2 - 1).latent_dist.mode()
    torch.testing.assert_close(world.encode_images(images), (z - 0.0609) * 1.5305)


def test_cfg_is_off_by_default_and_matches_the_formula_when_on(pipe_dir):
    world = load_world(f"sd3:{pipe_dir}", settings=SETTINGS)
    assert world.guided() is world.transformer
    guided = load_world(f"sd3:{pipe_dir}", settings=SD3Settings(**{**SETTINGS.__dict__, "guidance_scale": 4.0}))
    e, neg = guided.encode_prompts(PROMPTS[:2]), guided.encode_prompts(["", ""])
    x = torch.randn(2, *guided.sample_shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        vc, vu = predict_velocity(guided.transformer, x, 0.7, e), predict_velocity(guided.transformer, x, 0.7, neg)
        torch.testing.assert_close(predict_velocity(guided.guided(), x, 0.7, e), vu + 4.0 * (vc - vu))


def _policy(world) -> Policy:
    """The trainer's policy on the world's transformer: LoRA r4 / alpha 8 and its old-policy and EMA copies."""
    return Policy(world.transformer, lora_rank=4, lora_alpha=8.0, seed=0)


def test_lora_targets_trainable_set_and_old_policy_decay(world):
    pol = _policy(world)
    tr = pol.transformer
    trainable = {n for n, p in tr.named_parameters() if p.requires_grad}
    assert trainable and all(".default." in n and "lora_" in n for n in trainable) and set(pol.names) == trainable
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable} >= {"to_q", "add_k_proj", "to_add_out"}
    # the release's targets: each block's joint attention `attn`, never the dual-attention block's second `attn2`
    assert any(".attn.to_q.lora_A.default" in n for n in trainable) and not any(".attn2." in n for n in trainable)
    new, old = pol.params, pol.old
    assert all(torch.equal(a, b) for a, b in zip(new, old))  # old starts as a copy of the trained adapter
    with torch.no_grad():
        for p in new:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    before = [p.detach().clone() for p in old]
    pol.update_old(0.3)
    for o, b, n in zip(old, before, new):
        torch.testing.assert_close(o, 0.3 * b + 0.7 * n)
    with pytest.raises(ValueError, match="decay"):
        pol.update_old(1.5)


def _p_from_rewards(R, G, c=5.0):
    """DiffusionNFT's optimality probability from raw rewards (per-group mean, global std, clip c)."""
    A = (R - R.reshape(-1, G).mean(1).repeat_interleave(G)) / (R.std() + 1e-4)
    return 0.5 + A.clamp(-c, c) / (2 * c)


def test_one_nft_step_trains_only_the_lora_and_moves_old_by_decay(world):
    from recast.worlds.sd3.rewards import get

    pol, gen = _policy(world), torch.Generator().manual_seed(0)
    tr = pol.transformer
    embeds, sigmas = world.encode_prompts(PROMPTS), sigma_schedule(3, 3.0)
    with pol.use("old") as old_tr, torch.no_grad():
        x0 = sample_ode(old_tr, embeds, sigmas, shape=world.sample_shape, generator=gen, return_trajectory=False).x0
    p = _p_from_rewards(get("jpeg")("cpu")(world.decode(x0), PROMPTS), G=2)
    sigma = sigmas[1].item()
    eps = torch.randn(x0.shape, generator=gen)
    x_sigma, u = (1 - sigma) * x0 + sigma * eps, eps - x0
    with pol.use("old") as old_tr, torch.no_grad():  # before the differentiable pass, as the trainer does
        v_old = predict_velocity(old_tr, x_sigma, sigma, embeds)
    v_theta = predict_velocity(tr, x_sigma, sigma, embeds)
    torch.testing.assert_close(v_theta.detach(), v_old)  # the policy starts at the old policy
    out = nft_loss(v_theta, v_old, u, p, nft_beta=1.0)
    out.loss.backward()
    grads = {n: prm.grad for n, prm in tr.named_parameters() if prm.grad is not None}
    assert grads and all(".default." in n for n in grads)
    assert any(g.abs().sum() > 0 for g in grads.values())
    opt = torch.optim.AdamW(pol.params, lr=1e-2)
    base = {n: prm.detach().clone() for n, prm in tr.named_parameters() if "lora_" not in n}
    old_before = [q.detach().clone() for q in pol.old]
    opt.step()
    assert all(torch.equal(base[n], prm) for n, prm in tr.named_parameters() if "lora_" not in n)
    pol.update_old(0.5)
    for o, b, q in zip(pol.old, old_before, pol.params):
        torch.testing.assert_close(o, 0.5 * b + 0.5 * q)
    assert any(not torch.equal(o, b) for o, b in zip(pol.old, old_before))


def test_one_grpo_step_on_a_stored_sde_transition(world):
    pol, gen = _policy(world), torch.Generator().manual_seed(1)
    tr = pol.transformer
    embeds, sigmas = world.encode_prompts(PROMPTS), sigma_schedule(3, 3.0)
    with pol.use("old") as old_tr, torch.no_grad():
        out = sample_sde(old_tr, embeds, sigmas, noise_level=0.7, shape=world.sample_shape, generator=gen)
    j = 1
    v = predict_velocity(tr, out.xs[j], sigmas[j].item(), embeds)
    step = sde_step(out.xs[j], v, sigmas[j].item(), sigmas[j + 1].item(), 0.7, sigma_max=sigmas[1].item(),
                    x_next=out.xs[j + 1])
    A = torch.tensor([1.0, -1.0, 0.5, -0.5])
    loss = grpo_loss(step.log_prob, out.log_probs[j], A, clip_range=0.2)
    torch.testing.assert_close(loss.ratio, torch.tensor(1.0))  # theta == old: every ratio is 1
    loss.loss.backward()
    grads = {n: prm.grad for n, prm in tr.named_parameters() if prm.grad is not None}
    assert grads and all(".default." in n for n in grads) and any(g.abs().sum() > 0 for g in grads.values())


def test_lora_round_trips_through_stock_load_lora_weights(world, pipe_dir, tmp_path):
    from diffusers import StableDiffusion3Pipeline

    pol = _policy(world)
    tr = pol.transformer
    with torch.no_grad():
        for p in pol.params:
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    L.save_lora(tr, tmp_path / "lora")
    assert (tmp_path / "lora" / L.LORA_WEIGHT_NAME).is_file()
    fresh = StableDiffusion3Pipeline.from_pretrained(pipe_dir)
    fresh.load_lora_weights(tmp_path / "lora")
    e = world.encode_prompts(PROMPTS[:2])
    x = torch.randn(2, *world.sample_shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = predict_velocity(tr, x, 0.6, e)
        got = predict_velocity(fresh.transformer, x, 0.6, e)
        with pol.use("ref") as base_tr:  # the base model: adapters off
            base = predict_velocity(base_tr, x, 0.6, e)
    assert (want - base).abs().max() > 1e-3  # the adapter does something
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)  # alpha / rank survive the round trip


def test_tiny_spec_and_evaluate_with_held_out_judges():
    world = load_world("sd3-tiny", settings=SD3Settings(**{**SETTINGS.__dict__, "judges": ("jpeg",),
                                                          "gradient_checkpointing": True}))
    assert isinstance(world, World) and world.reward_settings["quality"][0] == "pickscore"
    assert world.transformer.is_gradient_checkpointing
    flat, noisy = torch.full((2, 3, 8, 8), 0.5), torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = world.evaluate(torch.cat([flat, noisy]), ["a", "a", "b", "b"])
    assert set(out) == {"jpeg", "diversity"} and out["diversity"] > 0
    assert "diversity" not in world.evaluate(flat, ["a", "b"])
    with pytest.raises(ValueError, match="unknown SD3 reward"):
        world.reward("nope", "cpu")


def test_bf16_base_keeps_both_adapters_in_fp32_and_decode_chunks(pipe_dir):
    world = load_world(f"sd3:{pipe_dir}", settings=SD3Settings(**{**SETTINGS.__dict__, "dtype": "bfloat16",
                                                                   "decode_batch": 1}))
    assert world.transformer.dtype == torch.bfloat16 and world.pipe.vae.dtype == torch.float32
    pol = Policy(world.transformer, lora_rank=4, lora_alpha=8.0)
    assert all(p.dtype == torch.float32 for p in pol.params + pol.old + pol.ema)
    e = world.encode_prompts(PROMPTS[:2])
    assert e.encoder_hidden_states.dtype == torch.bfloat16
    x = torch.randn(3, *world.sample_shape, generator=torch.Generator().manual_seed(0))
    with pol.use("old") as tr, torch.no_grad():
        assert predict_velocity(tr, x[:2].bfloat16(), 0.5, e).dtype == torch.bfloat16
    whole = load_world(f"sd3:{pipe_dir}", settings=SETTINGS).decode(x)
    torch.testing.assert_close(world.decode(x), whole)  # one image per VAE pass gives the same images
    world.offload_text_encoders("cpu")
    with pytest.raises(ValueError, match="decode_batch"):
        SD3Settings(decode_batch=0)


@pytest.mark.gpu
def test_nft_step_in_bf16_on_cuda(pipe_dir):
    world = load_world(f"sd3:{pipe_dir}", settings=SD3Settings(**{**SETTINGS.__dict__, "dtype": "bfloat16"})).to("cuda")
    pol = Policy(world.transformer, lora_rank=4, lora_alpha=8.0)
    tr = pol.transformer
    embeds, gen = world.encode_prompts(PROMPTS), torch.Generator().manual_seed(0)
    x0 = torch.randn(4, *world.sample_shape, generator=gen).cuda().bfloat16()
    eps = torch.randn(x0.shape, generator=gen).cuda().bfloat16()
    x_sigma, u = 0.5 * x0 + 0.5 * eps, eps - x0
    with pol.use("old") as old_tr, torch.no_grad():
        v_old = predict_velocity(old_tr, x_sigma, 0.5, embeds)
    v = predict_velocity(tr, x_sigma, 0.5, embeds)
    out = nft_loss(v.float(), v_old.float(), u.float(), torch.tensor([0.9, 0.1, 0.6, 0.4], device="cuda"))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(".default." in n for n, p in tr.named_parameters() if p.grad is not None)
    assert world.decode(x0).shape == (4, 3, TINY_RESOLUTION, TINY_RESOLUTION)

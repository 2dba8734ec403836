"""Digit world: tokenizer, SD3-shaped conditioning, save/load round trip, and the committed base checkpoint."""

import time
from pathlib import Path

import pytest
import torch

from recast.worlds.digits.data import CANVAS, VOCAB, prompt_set
from recast.worlds.digits.model import WORLD_FILES, load_world, save_world, tiny_world
from recast.sampling import predict_velocity, sample_ode, sigma_schedule

BASE = Path(__file__).resolve().parents[1] / "data" / "digit_base"
PROMPTS = ["a large red 7 at the top left", "a small blue 2 at the bottom right", "a small yellow 0 at the top right"]


@pytest.fixture(scope="module")
def world():
    return tiny_world(0)


def test_tokenizer_covers_the_grammar(world):
    tok = world.tokenizer
    ids = tok(list(VOCAB), add_special_tokens=False)["input_ids"]
    assert all(len(i) == 1 and i[0] != tok.unk_token_id for i in ids)
    assert len({i[0] for i in ids}) == len(VOCAB)
    batch = tok(prompt_set("train") + prompt_set("test"), padding="max_length", truncation=True,
                max_length=tok.model_max_length)
    for row in batch["input_ids"]:
        assert row[0] == tok.bos_token_id and tok.eos_token_id in row and tok.unk_token_id not in row
    assert tok("a purple 7")["input_ids"][2] == tok.unk_token_id


def test_encode_prompts_has_sd3_shapes(world):
    with torch.no_grad():
        e = world.encode_prompts(PROMPTS)
    cfg = world.config.text
    assert e.encoder_hidden_states.shape == (3, cfg.max_length, cfg.hidden_size)
    assert e.pooled_projections.shape == (3, cfg.projection_dim)
    assert not torch.allclose(e.pooled_projections[0], e.pooled_projections[1])
    assert world.transformer.config.pos_embed_max_size == CANVAS // world.config.patch_size
    v = predict_velocity(world.transformer, torch.randn(3, *world.sample_shape), 0.5, e)
    assert v.shape == (3, 3, CANVAS, CANVAS)


def test_decode_maps_to_unit_interval(world):
    x = torch.linspace(-2, 2, 3 * CANVAS * CANVAS).view(1, 3, CANVAS, CANVAS)
    img = world.decode(x)
    assert img.min() == 0 and img.max() == 1
    torch.testing.assert_close(world.decode(torch.zeros(1, 3, 2, 2)), torch.full((1, 3, 2, 2), 0.5))


def test_tiny_world_is_deterministic_in_seed():
    a, b, c = tiny_world(3), tiny_world(3), tiny_world(4)
    sa, sb, sc = a.transformer.state_dict(), b.transformer.state_dict(), c.transformer.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_save_load_round_trip_is_exact(world, tmp_path):
    out = tmp_path / "w"
    save_world(world, out)
    save_world(world, out)  # overwriting an existing checkpoint works (rename swap)
    assert sorted(p.name for p in out.iterdir()) == sorted(WORLD_FILES)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left behind
    loaded = load_world(out)
    for mine, theirs in [(world.transformer, loaded.transformer), (world.text_encoder, loaded.text_encoder)]:
        sd, sd2 = mine.state_dict(), theirs.state_dict()
        assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    sigmas = sigma_schedule(3)
    with torch.no_grad():
        x = sample_ode(world.transformer, world.encode_prompts(PROMPTS), sigmas, shape=world.sample_shape, generator=g())
        y = sample_ode(loaded.transformer, loaded.encode_prompts(PROMPTS), sigmas, shape=world.sample_shape,
                       generator=g())
    assert torch.equal(x.x0, y.x0)


def test_load_world_names_the_missing_file(world, tmp_path):
    with pytest.raises(FileNotFoundError, match="world.json"):
        load_world(tmp_path / "nowhere")
    save_world(world, tmp_path / "w")
    (tmp_path / "w" / "text_encoder.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="text_encoder.safetensors"):
        load_world(tmp_path / "w")


@pytest.mark.slow
@pytest.mark.skipif(not (BASE / "world.json").is_file(),
                    reason="data/digit_base not committed yet: python -m recast.worlds.digits.pretrain --out data/digit_base")
def test_base_checkpoint_is_in_the_quality_band():
    """The committed base model leaves room on every attribute at once, so few samples pass the strict judge.

    Each attribute is right on 35-62 % of test samples (tests/test_base_model.py, data/README.md "digit_base"), so
    all four at once are right on about their product, 0.08 (0.078 on 256 samples); the bounds leave room for the
    sampling error of 64 samples (sd ~ 0.03) and exclude both a model with nothing to learn and a broken one.
    """
    pytest.importorskip("recast.worlds.digits.judges.attributes", reason="recast/worlds/digits/judges not available")
    from recast.worlds.digits.pretrain import evaluate_world

    start = time.time()
    world = load_world(BASE)
    frac = evaluate_world(world, n=64, seed=0).strict
    assert 0.01 <= frac <= 0.25, f"strict judge fraction {frac:.3f} outside [0.01, 0.25]"
    assert time.time() - start < 20

"""A tiny random `StableDiffusion3Pipeline` built from config, offline, for tests and CPU notebooks.

Every component has SD3's real class and wiring, only smaller: two `CLIPTextModelWithProjection` towers, a
`T5EncoderModel`, an `SD3Transformer2DModel` with SD3.5's dual-attention layer and RMS q/k norm, a 16-channel
`AutoencoderKL` with scaling and shift factors, and the flow-matching scheduler with SD3.5's shift 3. Tokenizers are
a character-level CLIP BPE and a character-level T5 unigram built from a generated vocabulary, so nothing downloads.
`save_tiny_pipeline(dir)` writes it with `save_pretrained`, so `load_sd3_world(dir)` exercises the real loader.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch

__all__ = ["TINY_RESOLUTION", "CLIP_BOS", "CLIP_EOS", "clip_tokenizer", "build_tiny_pipeline", "save_tiny_pipeline",
           "save_tiny_rewards",
           "tiny_sd3_world"]

TINY_RESOLUTION = 32  # pixels per side; the tiny VAE downsamples by 2 -> 16x16 latents, 8x8 tokens at patch 2
_CHARS = string.ascii_lowercase + string.digits + ".,'-"
_CLIP_LEN = 16  # CLIP token positions (SD3 uses 77)
_CLIP_DIM, _CLIP_PROJ, _T5_DIM = 16, 16, 32  # joint dim = T5 width >= 2 CLIP widths, pooled = 2 CLIP projections


# Special tokens go last: OWL-ViT treats a query whose first id is 0 as padding, and CLIP pools at argmax(id) when
# eos_token_id == 2, so neither may sit at the front.
_CLIP_TOKENS = [*_CHARS, *(c + "</w>" for c in _CHARS), "<|startoftext|>", "<|endoftext|>"]
CLIP_BOS, CLIP_EOS = len(_CLIP_TOKENS) - 2, len(_CLIP_TOKENS) - 1


def clip_tokenizer():
    """A character-level CLIP BPE tokenizer (no merges) over a generated vocabulary; BOS/EOS ids `CLIP_BOS/EOS`."""
    from transformers import CLIPTokenizer

    vocab = {t: i for i, t in enumerate(_CLIP_TOKENS)}
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=_CLIP_LEN)


def _t5_tokenizer():
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *(("\u2581" + c, -1.0) for c in _CHARS),
              *((c, -2.0) for c in _CHARS), ("\u2581", -3.0)]
    return T5TokenizerFast(vocab=pieces, extra_ids=0, model_max_length=_CLIP_LEN)


def _clip_text(vocab_size: int):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    return CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=_CLIP_DIM, intermediate_size=32, projection_dim=_CLIP_PROJ,
        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=_CLIP_LEN,
        bos_token_id=CLIP_BOS, eos_token_id=CLIP_EOS, pad_token_id=CLIP_EOS))


def build_tiny_pipeline(seed: int = 0):
    """A random tiny `StableDiffusion3Pipeline` (deterministic in `seed`; the global RNG is left untouched)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, \
        StableDiffusion3Pipeline
    from transformers import T5Config, T5EncoderModel

    tok, tok3 = clip_tokenizer(), _t5_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        te, te2 = _clip_text(len(tok)), _clip_text(len(tok))
        te3 = T5EncoderModel(T5Config(vocab_size=len(tok3), d_model=_T5_DIM, d_kv=8, d_ff=32, num_layers=1,
                                      num_heads=2, relative_attention_num_buckets=8, pad_token_id=0,
                                      eos_token_id=1, decoder_start_token_id=0))
        transformer = SD3Transformer2DModel(
            sample_size=TINY_RESOLUTION // 2, patch_size=2, in_channels=16, out_channels=16, num_layers=2,
            attention_head_dim=8, num_attention_heads=2, joint_attention_dim=_T5_DIM, caption_projection_dim=16,
            pooled_projection_dim=2 * _CLIP_PROJ, pos_embed_max_size=16, dual_attention_layers=(0,),
            qk_norm="rms_norm")
        vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                            up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                            layers_per_block=1, latent_channels=16, norm_num_groups=8, sample_size=TINY_RESOLUTION,
                            scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
                            use_post_quant_conv=False)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=te,
                                    tokenizer=tok, text_encoder_2=te2, tokenizer_2=tok, text_encoder_3=te3,
                                    tokenizer_3=tok3)


def save_tiny_pipeline(path: str | Path, seed: int = 0) -> Path:
    """Build the tiny pipeline and `save_pretrained` it to `path` (a diffusers folder with model_index.json), written
    beside it and renamed into place (`recast.io.atomic_dir`: never half a folder, never through a link)."""
    from recast.io import atomic_dir

    pipe = build_tiny_pipeline(seed)
    return atomic_dir(Path(path), pipe.save_pretrained)


def tiny_sd3_world(arg: str | None = None, *, seed: int = 0, **kwargs):
    """The "sd3-tiny" spec: an `SD3World` over the tiny pipeline, kept in memory (nothing written)."""
    from recast.worlds.sd3.settings import resolve_tiny_settings
    from recast.worlds.sd3.world import SD3World

    settings = kwargs.pop("settings", None) or resolve_tiny_settings(arg, "composition", {})[0]
    return SD3World(build_tiny_pipeline(int(arg) if arg else seed), settings, **kwargs)


def save_tiny_rewards(root: str | Path, seed: int = 0) -> Path:
    """Tiny random reward models for every model-based SD3 reward (pickscore, clipscore, hpsv2, aesthetic,
    imagereward, geneval, hpsv3), saved under `root` as the real ones are (docs/paper-scale.md), offline: so a
    paper-scale command runs end to end on CPU with the tiny pipeline (a smoke test, not a measurement). ocr needs no
    weights; unifiedreward needs an endpoint (its folder's endpoint.json) or a VLM folder, which is not written here."""
    from transformers import (BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor, CLIPConfig,
                              CLIPImageProcessor, CLIPModel, CLIPProcessor, OwlViTConfig, OwlViTForObjectDetection,
                              OwlViTImageProcessor, OwlViTProcessor)

    from recast.io import atomic_dir, save_safetensors
    from recast.worlds.sd3.rewards.clip import AestheticMLP

    root, tok = Path(root), clip_tokenizer()
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                max_position_embeddings=_CLIP_LEN, bos_token_id=CLIP_BOS, eos_token_id=CLIP_EOS, pad_token_id=CLIP_EOS,
                vocab_size=len(tok))
    vision = dict(image_size=32, patch_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        clip = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=8))
        proc = CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                crop_size={"height": 32, "width": 32}), tokenizer=tok)
        # each reward's folder is written beside it and renamed into place (recast.io.atomic_dir); the models are made
        # in the order they always were, so the seeded weights are the same
        def write_clip(d, name):
            clip.save_pretrained(d)
            proc.save_pretrained(d)
            if name == "aesthetic":
                save_safetensors(d / "aesthetic_mlp.safetensors", AestheticMLP(8).state_dict())

        for name in ("pickscore", "clipscore", "hpsv2", "aesthetic"):
            atomic_dir(root / name, lambda d, name=name: write_clip(d, name))
        blip = BlipForImageTextRetrieval(BlipConfig(
            text_config={**text, "max_position_embeddings": 40, "encoder_hidden_size": 16}, vision_config=vision,
            projection_dim=8, image_text_hidden_size=8))

        def write_imagereward(d):
            blip.save_pretrained(d)
            BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)
            tok.save_pretrained(d)
            save_safetensors(d / "imagereward_mlp.safetensors", AestheticMLP(16).state_dict())

        atomic_dir(root / "imagereward", write_imagereward)
        owl = OwlViTForObjectDetection(OwlViTConfig(text_config=text, vision_config=vision, projection_dim=16))

        def write_geneval(d):
            owl.save_pretrained(d)
            OwlViTProcessor(image_processor=OwlViTImageProcessor(size={"height": 32, "width": 32},
                                                                 crop_size={"height": 32, "width": 32}),
                            tokenizer=tok).save_pretrained(d)

        atomic_dir(root / "geneval", write_geneval)
    from recast.worlds.sd3.vlm_tiny import save_tiny_hpsv3

    atomic_dir(root / "hpsv3", lambda d: save_tiny_hpsv3(d, seed))
    return root

"""The digit world as a text-to-image model: a pixel-space SD3 transformer plus a tiny CLIP text tower.

`DigitWorld` exposes the same pieces the trainer uses at paper scale (SD3.5-Medium): a diffusers
`SD3Transformer2DModel`, `encode_prompts(prompts) -> PromptEmbeds` and `decode(x0) -> images in [0, 1]`. Here the
model space is the RGB canvas itself (3 x CANVAS x CANVAS in [-1, 1]), so `decode` is an affine map.

A checkpoint folder holds `world.json` (configs and vocabulary), `transformer.safetensors` and
`text_encoder.safetensors`; `save_world` writes it atomically, `load_world` rebuilds the modules from the configs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from diffusers import SD3Transformer2DModel
from safetensors.torch import load_file, save_file
from transformers import CLIPTextModelWithProjection, PreTrainedTokenizerFast

from recast.worlds.digits.data import CANVAS, PALETTES, VOCAB, set_palette, to_images
from recast.worlds.digits.text import TextEncoderConfig, build_text_encoder, build_tokenizer, encode_text
from recast.io import current_umask, read_json, write_json
from recast.sampling import PromptEmbeds

__all__ = ["WorldConfig", "DigitWorld", "PromptEmbeds", "build_world", "tiny_world", "load_world", "save_world",
           "WORLD_FILES", "PRESETS"]

WORLD_FILES = ("world.json", "transformer.safetensors", "text_encoder.safetensors")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class WorldConfig:
    """Sizes of the digit world's transformer and text tower."""

    num_layers: int = 4  # SD3 joint transformer blocks (the last one is context-pre-only, as in SD3)
    num_attention_heads: int = 4  # heads per block
    attention_head_dim: int = 24  # width per head; inner dim = heads * head_dim
    patch_size: int = 2  # pixels per patch side: CANVAS / patch_size tokens per side
    text: TextEncoderConfig = TextEncoderConfig()  # the CLIP text tower

    def transformer_kwargs(self) -> dict:
        """Keyword arguments for `SD3Transformer2DModel` (pixel space, 3 channels, SD3 conditioning widths)."""
        inner = self.num_attention_heads * self.attention_head_dim
        return dict(
            sample_size=CANVAS,
            patch_size=self.patch_size,
            in_channels=3,
            out_channels=3,
            num_layers=self.num_layers,
            attention_head_dim=self.attention_head_dim,
            num_attention_heads=self.num_attention_heads,
            joint_attention_dim=self.text.hidden_size,
            caption_projection_dim=inner,
            pooled_projection_dim=self.text.projection_dim,
            pos_embed_max_size=CANVAS // self.patch_size,
        )


PRESETS: dict[str, WorldConfig] = {
    # A random model for tests: builds and runs a sampling step in milliseconds.
    "tiny": WorldConfig(num_layers=1, num_attention_heads=2, attention_head_dim=8,
                        text=TextEncoderConfig(hidden_size=16, projection_dim=16, num_layers=1, num_heads=2,
                                               intermediate_size=32)),
    # The committed base model (data/digit_base): sized so pretraining fits ~15 min on 2 CPU cores.
    "base": WorldConfig(),
}


@dataclass(frozen=True)
class DigitWorld:
    """A text-to-image flow model over digit canvases.

    Attributes:
        transformer: `SD3Transformer2DModel` predicting velocities (B, 3, CANVAS, CANVAS).
        text_encoder: `CLIPTextModelWithProjection` giving SD3's two conditioning tensors.
        tokenizer: word-level tokenizer over `recast.worlds.digits.data.VOCAB`.
        config: the sizes it was built from.
        palette: the colours it draws, a key of `recast.worlds.digits.data.PALETTES` ("primary", the default world's).
            `load_world` makes it the process's palette, which the rewards and judges read.
    """

    transformer: SD3Transformer2DModel
    text_encoder: CLIPTextModelWithProjection
    tokenizer: PreTrainedTokenizerFast
    config: WorldConfig
    palette: str = "primary"

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one model-space sample."""
        return (3, CANVAS, CANVAS)

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    def to(self, device: str | torch.device) -> DigitWorld:
        """Move both networks to `device` (in place) and return self."""
        self.transformer.to(device)
        self.text_encoder.to(device)
        return self

    def parameters(self) -> list[torch.nn.Parameter]:
        """All trainable parameters: transformer then text encoder."""
        return [*self.transformer.parameters(), *self.text_encoder.parameters()]

    def encode_prompts(self, prompts: Sequence[str]) -> PromptEmbeds:
        """SD3 conditioning: encoder_hidden_states (B, L, D) and pooled_projections (B, P).

        Gradients flow if enabled by the caller (wrap in `torch.no_grad()` when only sampling).
        """
        hidden, pooled = encode_text(self.tokenizer, self.text_encoder, prompts)
        return PromptEmbeds(hidden, pooled)

    def decode(self, x0: torch.Tensor) -> torch.Tensor:
        """Model space (B, 3, H, W) in ~[-1, 1] -> images (B, 3, H, W) in [0, 1] (clamped)."""
        return to_images(x0)


def build_world(config: WorldConfig = WorldConfig(), seed: int = 0) -> DigitWorld:
    """A randomly initialised world (deterministic in `seed`; the global RNG is left untouched)."""
    tokenizer = build_tokenizer(VOCAB, max_length=config.text.max_length)
    text_encoder = build_text_encoder(len(tokenizer), config.text, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        transformer = SD3Transformer2DModel(**config.transformer_kwargs()).eval()
    return DigitWorld(transformer, text_encoder, tokenizer, config)


def tiny_world(seed: int = 0) -> DigitWorld:
    """A random tiny world for tests (the `"tiny"` preset)."""
    return build_world(PRESETS["tiny"], seed=seed)


def _state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").contiguous() for k, v in module.state_dict().items()}


def save_world(world: DigitWorld, path: str | os.PathLike) -> Path:
    """Write `world` to the folder `path` atomically.

    Everything is written to a temporary sibling folder first, which then replaces `path` by rename, so a crash
    never leaves a half-written checkpoint. Any other files previously in `path` are removed.

    Returns:
        The folder path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    try:
        meta = {"format": FORMAT_VERSION, "world": asdict(world.config), "vocab": list(VOCAB)}
        if world.palette != "primary":  # the default world's world.json stays byte-identical
            meta["palette"] = world.palette
        write_json(tmp / "world.json", meta)
        save_file(_state_dict(world.transformer), tmp / "transformer.safetensors")
        save_file(_state_dict(world.text_encoder), tmp / "text_encoder.safetensors")
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes a private (0700) folder; give the mode mkdir would have
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_world(path: str | os.PathLike = "data/digit_base", device: str | torch.device = "cpu") -> DigitWorld:
    """Load a world saved by `save_world`, in eval mode, on `device`, and make its palette the process's
    (`recast.worlds.digits.data.set_palette`; "primary" where `world.json` names none), so that renders, rewards and judges
    read colours as the world draws them.

    Raises:
        FileNotFoundError: naming the first missing file (with a hint on how to make the base checkpoint).
        ValueError: if the vocabulary stored with the checkpoint differs from `recast.worlds.digits.data.VOCAB`, or its
            palette is not a key of `recast.worlds.digits.data.PALETTES`.
    """
    path = Path(path)
    for name in WORLD_FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(
                f"digit world checkpoint incomplete: missing {path / name} "
                "(make the base model with `python -m recast.worlds.digits.pretrain --out data/digit_base`)"
            )
    meta = read_json(path / "world.json")
    if tuple(meta["vocab"]) != tuple(VOCAB):
        raise ValueError(f"{path / 'world.json'}: vocabulary differs from recast.worlds.digits.data.VOCAB")
    palette = meta.get("palette", "primary")
    if palette not in PALETTES:
        raise ValueError(f"{path / 'world.json'}: unknown palette {palette!r}; valid: {', '.join(PALETTES)}")
    cfg = dict(meta["world"])
    config = WorldConfig(**{**cfg, "text": TextEncoderConfig(**cfg["text"])})
    world = replace(build_world(config), palette=palette)
    world.transformer.load_state_dict(load_file(path / "transformer.safetensors"), strict=True)
    world.text_encoder.load_state_dict(load_file(path / "text_encoder.safetensors"), strict=True)
    world.transformer.eval()
    world.text_encoder.eval()
    set_palette(palette)
    return world.to(device)

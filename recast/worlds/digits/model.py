"""The digit world as a text-to-image model: a pixel-space SD3 transformer plus a tiny CLIP text tower.

`DigitWorld` exposes the same pieces the trainer uses at paper scale (SD3.5-Medium): a diffusers
`SD3Transformer2DModel`, `encode_prompts(prompts) -> PromptEmbeds` and `decode(x0) -> images in [0, 1]`. Here the
model space is the RGB canvas itself (3 x CANVAS x CANVAS in [-1, 1]), so `decode` is an affine map.

A checkpoint folder holds `world.json` (configs, vocabulary and a sha256 of each weights file),
`transformer.safetensors` and `text_encoder.safetensors`; `save_world` writes it atomically, `load_world` checks
world.json's fields and the weights' checksums, then rebuilds the modules from the configs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from diffusers import SD3Transformer2DModel
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file
from transformers import CLIPTextModelWithProjection, PreTrainedTokenizerFast

from recast.worlds.digits.data import CANVAS, PALETTES, VOCAB, set_palette, to_images
from recast.worlds.digits.text import (SPECIAL_TOKENS, TextEncoderConfig, build_text_encoder, build_tokenizer,
                                       encode_text)
from recast.io import current_umask, read_json, write_json
from recast.sampling import PromptEmbeds

__all__ = ["WorldConfig", "DigitWorld", "PromptEmbeds", "build_world", "tiny_world", "load_world", "save_world",
           "WORLD_FILES", "WEIGHT_FILES", "PRESETS", "WORLD_BOUNDS", "TEXT_BOUNDS", "MAX_INNER_DIM",
           "MAX_PARAMETERS", "approx_parameters"]

WORLD_FILES = ("world.json", "transformer.safetensors", "text_encoder.safetensors")
WEIGHT_FILES = WORLD_FILES[1:]  # the files world.json's "checksums" covers
FORMAT_VERSION = 1  # "checksums" was added without a bump: it is optional, and readers before it ignore it

# Bounds on world.json's architecture fields (inclusive), checked before any tensor is allocated: a typo such as
# num_layers 100000 used to build for 22 s under a 4 GB memory cap (and run out of memory without one) before failing.
# The upper bounds are far above any digit world one would train on a CPU or one GPU (the committed base has 4 layers,
# 4 heads x 24, a 64-wide text tower of 2 layers and 12 tokens, 1.4M parameters), and MAX_PARAMETERS caps the
# combination, since fields each within bounds can still ask for tens of billions of parameters.
WORLD_BOUNDS = {"num_layers": (1, 64), "num_attention_heads": (1, 64), "attention_head_dim": (1, 512),
                "patch_size": (1, CANVAS)}
TEXT_BOUNDS = {"hidden_size": (1, 4096), "projection_dim": (1, 4096), "num_layers": (1, 64), "num_heads": (1, 64),
               "intermediate_size": (1, 16384), "max_length": (2, 512)}  # max_length: BOS and EOS at least
MAX_INNER_DIM = 4096  # num_attention_heads * attention_head_dim, the transformer's width
MAX_PARAMETERS = 1_000_000_000  # 4 GB of float32 weights


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


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def approx_parameters(config: WorldConfig, vocab_size: int = len(SPECIAL_TOKENS) + len(VOCAB)) -> int:
    """About how many parameters `build_world(config)` makes, computed without building anything.

    A slight overestimate (by 5-10 % at the base's size and above, 30 % for the tiny preset), which is what a bound
    on memory wants.

    Per SD3 joint block ~36 d^2 (two AdaLN-Zero modulations 6 d^2 each, joint attention 8 d^2, two 4x MLPs 8 d^2
    each), per CLIP layer 4 h^2 + 2 h * intermediate, plus the embeddings and projections.
    """
    d, t, p = config.num_attention_heads * config.attention_head_dim, config.text, config.patch_size
    transformer = (36 * config.num_layers * d * d + 4 * d * d + (CANVAS // p) ** 2 * d + 6 * p * p * d
                   + (256 + t.hidden_size + t.projection_dim) * d)
    text = (t.num_layers * (4 * t.hidden_size ** 2 + 2 * t.hidden_size * t.intermediate_size)
            + (vocab_size + t.max_length + t.projection_dim) * t.hidden_size)
    return transformer + text


def _check_fields(obj, fields: dict[str, tuple], where: str, file: Path) -> None:
    """Refuse a non-object, a missing or unknown key, or a value of the wrong type in one level of world.json.

    Args:
        fields: key -> (type or tuple of types, required).
        where: the dotted prefix of the keys in messages ("" at the top level, "world." below it).
    """
    if not isinstance(obj, dict):  # only the top level can get here: below it, the parent's check saw a dict
        raise ValueError(f"{file}: must hold a JSON object, got {type(obj).__name__}")
    unknown = [k for k in obj if k not in fields]
    if unknown:
        raise ValueError(f"{file}: unknown field '{where}{unknown[0]}' (valid: {', '.join(fields)})")
    for key, (kind, required) in fields.items():
        if key not in obj:
            if required:
                raise ValueError(f"{file}: required field '{where}{key}' is missing")
            continue
        value = obj[key]
        # bool is an int subclass, but `true` is no layer count
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ValueError(f"{file}: field '{where}{key}' must be {'an' if names[0] in 'aeiou' else 'a'} {names}, "
                             f"got {value!r}")


def _check_bounds(obj: dict, bounds: dict[str, tuple[int, int]], where: str, file: Path) -> None:
    for key, (low, high) in bounds.items():
        if not low <= obj[key] <= high:
            raise ValueError(f"{file}: field '{where}{key}' must be between {low} and {high}, got {obj[key]} "
                             "(bounds far above any digit world's, checked before building the model)")


def _read_meta(file: Path) -> tuple[WorldConfig, str, dict[str, str]]:
    """world.json's config, palette and checksums, every field checked before anything is built.

    Raises:
        ValueError: naming the file and the field: not JSON, a missing, unknown or mistyped field, an architecture
            field out of bounds, a vocabulary other than `VOCAB`, an unknown palette, or malformed checksums.
    """
    meta = read_json(file)
    _check_fields(meta, {"format": (int, True), "world": (dict, True), "vocab": (list, True),
                         "palette": (str, False), "checksums": (dict, False)}, "", file)
    if meta["format"] != FORMAT_VERSION:
        raise ValueError(f"{file}: field 'format' must be {FORMAT_VERSION}, got {meta['format']!r} "
                         "(written by another version of recast?)")
    cfg = meta["world"]
    _check_fields(cfg, {**{k: (int, True) for k in WORLD_BOUNDS}, "text": (dict, True)}, "world.", file)
    _check_fields(cfg["text"], {k: (int, True) for k in TEXT_BOUNDS}, "world.text.", file)
    _check_bounds(cfg, WORLD_BOUNDS, "world.", file)
    _check_bounds(cfg["text"], TEXT_BOUNDS, "world.text.", file)
    inner = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    if inner > MAX_INNER_DIM:
        raise ValueError(f"{file}: fields 'world.num_attention_heads' x 'world.attention_head_dim' = {inner}, above "
                         f"the bound of {MAX_INNER_DIM} on the transformer's width")
    if CANVAS % cfg["patch_size"]:
        raise ValueError(f"{file}: field 'world.patch_size' must divide the {CANVAS}-pixel canvas, "
                         f"got {cfg['patch_size']}")
    if cfg["text"]["hidden_size"] % cfg["text"]["num_heads"]:
        raise ValueError(f"{file}: field 'world.text.hidden_size' ({cfg['text']['hidden_size']}) must be a multiple "
                         f"of 'world.text.num_heads' ({cfg['text']['num_heads']})")
    config = WorldConfig(**{**cfg, "text": TextEncoderConfig(**cfg["text"])})
    size = approx_parameters(config)
    if size > MAX_PARAMETERS:
        raise ValueError(f"{file}: field 'world' describes about {size:,} parameters, above the bound of "
                         f"{MAX_PARAMETERS:,} ({MAX_PARAMETERS * 4 // 10**9} GB of float32); the base has 1.4M")
    if not all(isinstance(w, str) for w in meta["vocab"]):
        raise ValueError(f"{file}: field 'vocab' must be a list of strings")
    if tuple(meta["vocab"]) != tuple(VOCAB):
        raise ValueError(f"{file}: vocabulary differs from recast.worlds.digits.data.VOCAB")
    palette = meta.get("palette", "primary")
    if palette not in PALETTES:
        raise ValueError(f"{file}: unknown palette {palette!r}; valid: {', '.join(PALETTES)}")
    checksums = meta.get("checksums", {})  # folders saved before checksums existed hold none, and still load
    if "checksums" in meta:
        if sorted(checksums) != sorted(WEIGHT_FILES):
            raise ValueError(f"{file}: field 'checksums' must name exactly {', '.join(WEIGHT_FILES)}, "
                             f"got {', '.join(checksums) or 'none'}")
        bad = [k for k, v in checksums.items() if not (isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v))]
        if bad:
            raise ValueError(f"{file}: field 'checksums.{bad[0]}' must be a sha256 (64 lower-case hex digits), "
                             f"got {checksums[bad[0]]!r}")
    return config, palette, checksums


def _read_weights(file: Path, checksum: str | None) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, verified against its recorded sha256 when there is one.

    The file is read once and the very bytes that were hashed are parsed, so what loads is what was checked.
    """
    data = file.read_bytes()
    if checksum is not None and _sha256(data) != checksum:
        # kept short: the trainer quotes only the first 300 characters of a load error
        raise ValueError(f"{file}: sha256 {_sha256(data)[:12]} is not the {checksum[:12]} world.json records (corrupt "
                         "or changed since saving): restore it (`git checkout -- data/digit_base` for the committed "
                         "base) or re-save the world with save_world")
    return load_safetensors(data)


def save_world(world: DigitWorld, path: str | os.PathLike) -> Path:
    """Write `world` to the folder `path` atomically.

    Everything is written to a temporary sibling folder first, which then replaces `path` by rename, so a crash
    never leaves a half-written checkpoint. Any other files previously in `path` are removed. world.json records the
    sha256 of each weights file under "checksums", which `load_world` verifies.

    Returns:
        The folder path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    try:
        meta = {"format": FORMAT_VERSION, "world": asdict(world.config), "vocab": list(VOCAB)}
        if world.palette != "primary":  # the default world's world.json names none, as before palettes existed
            meta["palette"] = world.palette
        save_file(_state_dict(world.transformer), tmp / "transformer.safetensors")
        save_file(_state_dict(world.text_encoder), tmp / "text_encoder.safetensors")
        # hashed as they lie on disk, so a bad write is caught by the next load rather than recorded as good
        meta["checksums"] = {name: _sha256((tmp / name).read_bytes()) for name in WEIGHT_FILES}
        write_json(tmp / "world.json", meta)
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
    (`recast.worlds.digits.data.set_palette`; "primary" where `world.json` names none), so that renders, rewards and
    judges read colours as the world draws them.

    Every check runs before any module is built: world.json's fields (types, required keys, the architecture's
    bounds `WORLD_BOUNDS`, `TEXT_BOUNDS`, `MAX_INNER_DIM` and `MAX_PARAMETERS`), then each weights file against the
    sha256 world.json records (a world.json without "checksums", saved before they existed, skips that check).

    Raises:
        FileNotFoundError: naming the first missing file (with a hint on how to make the base checkpoint).
        ValueError: naming the file (and the field): world.json is not JSON, misses a field, holds an unknown or
            mistyped one or an architecture out of bounds, its vocabulary differs from
            `recast.worlds.digits.data.VOCAB`, its palette is not a key of `recast.worlds.digits.data.PALETTES`; or a
            weights file's sha256 differs from the one recorded (with how to restore it).
    """
    path = Path(path)
    for name in WORLD_FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(
                f"digit world checkpoint incomplete: missing {path / name} "
                "(make the base model with `python -m recast.worlds.digits.pretrain --out data/digit_base`)"
            )
    config, palette, checksums = _read_meta(path / "world.json")
    weights = {name: _read_weights(path / name, checksums.get(name)) for name in WEIGHT_FILES}
    world = replace(build_world(config), palette=palette)
    world.transformer.load_state_dict(weights["transformer.safetensors"], strict=True)
    world.text_encoder.load_state_dict(weights["text_encoder.safetensors"], strict=True)
    world.transformer.eval()
    world.text_encoder.eval()
    set_palette(palette)
    return world.to(device)

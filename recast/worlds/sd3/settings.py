"""How an SD3 world loads and runs: `SD3Settings`, their defaults per reward setting, and a run's overrides checked.

Each reward setting trains its own rewards on its own prompts and reports held-out judges it never trains on:

| setting | trains (`rewards.SETTINGS`) | prompts | held-out judges |
| --- | --- | --- | --- |
| composition | geneval, ocr, pickscore, clipscore | `compose_{train,test}.jsonl` (GenEval-style) | hpsv2, aesthetic, imagereward, colour_entropy |
| quality | pickscore, hpsv2, aesthetic, imagereward | `quality_{train,test}.txt` | clipscore, jpeg, colour_entropy, dark_fraction |
| stage1 | clipscore, hpsv2, pickscore | `quality_{train,test}.txt` (stand-in for Pick-a-Pic) | `PAPER_JUDGES` |
| stage_ocr | clipscore, hpsv2, pickscore, ocr | `compose_{train,test}.jsonl` (stand-in for OCR prompts) | `PAPER_JUDGES` |
| stage_geneval | clipscore, hpsv2, pickscore, geneval | `compose_{train,test}.jsonl` (stand-in for GenEval's) | `PAPER_JUDGES` |

geneval and ocr need the GenEval metadata and quoted text of the composition prompts, so quality's judges are the
prompt-alignment score it does not train (clipscore) and model-free measures of reward hacking (compressibility,
colour entropy, the dark-pixel share). The paper's staged settings report its four held-out judges, `PAPER_JUDGES`
(ImageReward, the LAION aesthetic predictor, HPSv3 and UnifiedReward-2); their default prompts are the committed
stand-ins above, and configs/paper/ names where the paper's own prompt files go. A pairwise VLM judge is added where ``vlm_judge`` is configured (an
OpenAI-compatible endpoint or local weights; notebook 06).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path

import torch

from recast.bounded import short_repr
from recast.config import DATA_ROOT

__all__ = ["DTYPES", "PAPER_JUDGES", "SD3Settings", "SETTING_DEFAULTS", "TINY_DEFAULTS", "resolve_settings",
           "resolve_tiny_settings"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DATA_PROMPTS = DATA_ROOT / "prompts"


@dataclass(frozen=True)
class SD3Settings:
    """How an SD3 world loads and runs (every field has a default fit for SD3.5-Medium at 512 px)."""

    resolution: int = 512  # image side in pixels; latents are resolution / 8 per side for SD3
    num_steps: int = 10  # sampling steps a caller should use (DiffusionNFT: 10)
    shift: float = 3.0  # SD3.5's time shift of the sigma grid
    guidance_scale: float = 1.0  # classifier-free guidance; 1.0 = CFG-free rollouts (DiffusionNFT's default)
    negative_prompt: str = ""  # unconditional prompt for CFG
    max_sequence_length: int = 256  # T5 tokens per prompt
    dtype: str = "bfloat16"  # transformer and text encoders: bfloat16 | float16 | float32
    vae_dtype: str = "float32"  # VAE (decoding in fp16 overflows on SD3's VAE; fp32 is safe)
    drop_t5: bool = False  # load without the 4.7B T5 encoder (zeros in its place; saves ~9 GB in bf16)
    gradient_checkpointing: bool = False  # trade compute for activation memory in the transformer
    # split -> prompt file (.txt or GenEval-style .jsonl); a relative path is looked up here, then in data/prompts
    prompt_files: dict = field(default_factory=lambda: {"train": str(DATA_PROMPTS / "compose_train.jsonl"),
                                                        "test": str(DATA_PROMPTS / "compose_test.jsonl")})
    reward_root: str = "reward_ckpts"  # folder holding one subfolder per reward model (docs/paper-scale.md)
    judges: tuple[str, ...] = ()  # held-out rewards reported by `evaluate` (never trained on)
    reward_scale: dict = field(default_factory=dict)  # reward name -> a factor its scores are multiplied by, for the
    #                                                   paper's "pre" aggregation, which mixes raw scores: the release's
    #                                                   PickScore is the logit / 26 ({pickscore: 0.0384615}); {} = as is
    vlm_judge: dict = field(default_factory=dict)  # pairwise VLM judge: {"endpoint": URL, "model": NAME,
    #                                                "api_key_env": VAR} or {"weights": DIR}; {} = none; optional
    #                                                timeout and retries (per request), deadline (s, whole judging)
    #                                                and max_failures (consecutive failed pairs, default 3)
    decode_batch: int = 8  # images per VAE decode pass (a 512 px fp32 decode of many images at once is GBs)

    def __post_init__(self):
        for name in ("dtype", "vae_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"SD3Settings.{name}={short_repr(getattr(self, name))}; valid: {', '.join(DTYPES)}")
        if self.resolution <= 0 or self.num_steps < 1 or self.guidance_scale < 1.0 or self.decode_batch < 1:
            raise ValueError(f"SD3Settings needs resolution > 0, num_steps >= 1, guidance_scale >= 1, "
                             f"decode_batch >= 1; got {self.resolution=}, {self.num_steps=}, "
                             f"{self.guidance_scale=}, {self.decode_batch=}")


SETTING_DEFAULTS: dict[str, dict] = {
    "composition": {"prompt_files": {"train": str(DATA_PROMPTS / "compose_train.jsonl"),
                                     "test": str(DATA_PROMPTS / "compose_test.jsonl")},
                    "judges": ("hpsv2", "aesthetic", "imagereward", "colour_entropy")},
    "quality": {"prompt_files": {"train": str(DATA_PROMPTS / "quality_train.txt"),
                                 "test": str(DATA_PROMPTS / "quality_test.txt")},
                "judges": ("clipscore", "jpeg", "colour_entropy", "dark_fraction")},
}
PAPER_JUDGES = ("imagereward", "aesthetic", "hpsv3", "unifiedreward")  # the paper's held-out judges (RECAST.md §0)
_QUALITY_PROMPTS = {"train": str(DATA_PROMPTS / "quality_train.txt"), "test": str(DATA_PROMPTS / "quality_test.txt")}
_COMPOSE_PROMPTS = {"train": str(DATA_PROMPTS / "compose_train.jsonl"),
                    "test": str(DATA_PROMPTS / "compose_test.jsonl")}
# the release scores PickScore as logit_scale · cos / 26 (ours: logit_scale · cos); its CLIPScore and HPSv2 are cosines,
# as ours are. Its "pre" aggregation mixes raw scores, so the scale is part of the budget: the stages take its scale.
RELEASE_SCALES = {"pickscore": 1.0 / 26.0}
SETTING_DEFAULTS.update({
    "stage1": {"prompt_files": _QUALITY_PROMPTS, "judges": PAPER_JUDGES, "reward_scale": RELEASE_SCALES},
    "stage_ocr": {"prompt_files": _COMPOSE_PROMPTS, "judges": PAPER_JUDGES, "reward_scale": RELEASE_SCALES},
    "stage_geneval": {"prompt_files": _COMPOSE_PROMPTS, "judges": PAPER_JUDGES, "reward_scale": RELEASE_SCALES},
})
# The tiny random pipeline: its own sizes, and only model-free judges (no reward weights exist for it offline).
TINY_DEFAULTS = {"resolution": 32, "max_sequence_length": 16, "dtype": "float32"}
TINY_JUDGES = ("jpeg", "colour_entropy", "dark_fraction")


def _typed(name: str, hint, value):
    """A world setting's value checked against its declared type (YAML gives lists for tuples)."""
    where = f"config field world_settings.{name}"
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif hint is dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
    else:  # tuple[str, ...]
        ok = isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ValueError(f"{where}: expected {getattr(hint, '__name__', str(hint))}, got {short_repr(value)}")
    return value


def _prompt_file(split: str, path: str) -> str:
    p = Path(path)
    for candidate in (p, DATA_PROMPTS / p):
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(f"config field world_settings.prompt_files.{split}: no prompt file {short_repr(path)} "
                            f"(looked in the working directory and {DATA_PROMPTS})")


# vlm_judge key -> (what it must be, the check); every value is checked before the settings are copied or used, so a
# nested or huge value (a YAML alias bomb) is refused in one bounded line rather than expanded
_VLM_KEYS = {
    "endpoint": ("an http:// or https:// URL", lambda v: isinstance(v, str) and v.startswith(("http://", "https://"))),
    "model": ("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip())),
    "api_key_env": ("the name of an environment variable", lambda v: isinstance(v, str) and bool(v.strip())),
    "weights": ("a folder path", lambda v: isinstance(v, str) and bool(v.strip())),
    "timeout": ("a number of seconds > 0", lambda v: _positive(v)),
    "retries": ("an integer >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "deadline": ("a number of seconds > 0 for the whole judging", lambda v: _positive(v)),
    "max_failures": ("an integer >= 1 (consecutive failed pairs before the judge stops)",
                     lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1),
}


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _check_vlm(cfg: dict) -> None:
    known = set(_VLM_KEYS)
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"config field world_settings.vlm_judge: unknown keys {short_repr(unknown)}; valid: "
                         f"{sorted(known)}")
    for key, value in cfg.items():
        what, ok = _VLM_KEYS[key]
        if not ok(value):
            raise ValueError(f"config field world_settings.vlm_judge.{key}: expected {what}, got {short_repr(value)}")
    if cfg and not (("endpoint" in cfg and "model" in cfg) or "weights" in cfg):
        raise ValueError("config field world_settings.vlm_judge: give endpoint and model (an OpenAI-compatible "
                         "server) or weights (a local model folder)")
    if "weights" in cfg and not Path(cfg["weights"]).is_dir():
        raise FileNotFoundError(f"config field world_settings.vlm_judge.weights: no folder "
                                f"{short_repr(cfg['weights'])}")


# (VAE downsampling, transformer patch, the transformer's largest token grid side) of SD3 pipelines, and of the tiny one
SD3_GEOMETRY, TINY_GEOMETRY = (8, 2, None), (2, 2, 16)
MAX_RESOLUTION = 4096  # where the pipeline's own token grid bound is unknown (a hub id not on disk)
MAX_SEQUENCE_LENGTH = 512  # T5 tokens: diffusers' SD3 pipeline refuses more


def _geometry(arg) -> tuple[int, int, int | None]:
    """`SD3_GEOMETRY` read from a local pipeline folder's vae/ and transformer/ config.json (no weights), or the
    defaults where they cannot be read."""
    from recast.io import read_json

    folder = Path(str(arg)) if arg else None
    try:
        vae = read_json(folder / "vae" / "config.json")
        tr = read_json(folder / "transformer" / "config.json")
        return 2 ** (len(vae["block_out_channels"]) - 1), int(tr["patch_size"]), tr.get("pos_embed_max_size")
    except (TypeError, OSError, ValueError, KeyError):
        return SD3_GEOMETRY


def _check_sizes(values: dict, geometry: tuple[int, int, int | None]) -> None:
    """resolution a multiple of VAE factor x patch (else the latents silently round down) within the transformer's
    token grid, and max_sequence_length within T5's, before any model loads."""
    factor, patch, grid = geometry
    step = factor * patch
    top = grid * step if isinstance(grid, int) and grid > 0 else MAX_RESOLUTION
    res = values.get("resolution", 512)
    if isinstance(res, int) and not (step <= res <= top and res % step == 0):
        raise ValueError(f"config field world_settings.resolution: {res} must be a multiple of {step} (VAE factor "
                         f"{factor} x patch {patch}) from {step} to {top} (this pipeline's largest), e.g. "
                         f"{min(top, max(step, res // step * step))}")
    n = values.get("max_sequence_length", 256)
    if isinstance(n, int) and not 1 <= n <= MAX_SEQUENCE_LENGTH:
        raise ValueError(f"config field world_settings.max_sequence_length: {n} must be from 1 to "
                         f"{MAX_SEQUENCE_LENGTH} (T5 tokens per prompt)")


def _resolve(base: dict, setting: str, overrides: dict,
             geometry: tuple[int, int, int | None] = SD3_GEOMETRY) -> tuple[SD3Settings, dict]:
    import recast.worlds.sd3.rewards as rewards

    hints = typing.get_type_hints(SD3Settings)
    fields = {f.name for f in dataclasses.fields(SD3Settings)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"config field world_settings: unknown SD3 settings {unknown}; valid: {sorted(fields)}")
    values = {**base, **SETTING_DEFAULTS.get(setting, SETTING_DEFAULTS["composition"])}
    for name, value in overrides.items():
        hint = hints[name]
        value = _typed(name, hint if hint in (bool, int, float, str, dict) else tuple, value)
        values[name] = {**values.get(name, {}), **value} if name == "prompt_files" else value
    _check_sizes(values, geometry)
    bad = {k: v for k, v in values["prompt_files"].items() if not isinstance(v, str)}
    if bad:
        raise ValueError(f"config field world_settings.prompt_files: each split names a file, got {short_repr(bad)}")
    values["prompt_files"] = {split: _prompt_file(split, path) for split, path in values["prompt_files"].items()}
    missing = [s for s in ("train", "test") if s not in values["prompt_files"]]
    if missing:
        raise ValueError(f"config field world_settings.prompt_files: needs a file for each of {missing}")
    from recast.worlds.sd3.prompts import load_prompts

    for path in values["prompt_files"].values():
        load_prompts(path)  # a file that does not parse is refused now, naming it, not at the first rollout
    for name in values.get("judges", ()):
        rewards.get(name)  # unknown judge names are refused here, before any model loads
    _check_vlm(values.get("vlm_judge", {}))
    for name, factor in values.get("reward_scale", {}).items():
        if name not in rewards.names() or isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
                not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"config field world_settings.reward_scale.{short_repr(name)}: expected a registered "
                             f"reward and a finite factor > 0, got {short_repr(factor)}")
    settings = SD3Settings(**values)
    plain = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(settings).items()}
    return settings, plain


def resolve_settings(arg, setting: str, overrides: dict, rewards=()) -> tuple[SD3Settings, dict]:
    """`SD3Settings` for "sd3:PATH" and a reward setting: SD3.5-Medium's defaults, the setting's prompts and
    judges, then a run's ``world_settings``. Raises ValueError / FileNotFoundError naming the setting at fault."""
    settings, plain = _resolve({}, setting, overrides, _geometry(arg))
    _check_installed(settings, rewards)
    return settings, plain


def resolve_tiny_settings(arg, setting: str, overrides: dict, rewards=()) -> tuple[SD3Settings, dict]:
    """As `resolve_settings` for "sd3-tiny": the tiny pipeline's sizes and model-free judges."""
    base = dict(TINY_DEFAULTS)
    settings, plain = _resolve(base, setting, {"judges": TINY_JUDGES, **overrides}, TINY_GEOMETRY)
    _check_installed(settings, rewards)
    return settings, plain


def _check_installed(settings: SD3Settings, rewards) -> None:
    """The rewards a run trains (resolved by the caller) and its judges have their packages installed."""
    import recast.worlds.sd3.rewards as registry

    registry.check_installed((*rewards, *settings.judges))

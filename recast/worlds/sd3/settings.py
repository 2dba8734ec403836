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
import typing
from dataclasses import dataclass, field
from pathlib import Path

import torch

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
    vlm_judge: dict = field(default_factory=dict)  # pairwise VLM judge: {"endpoint": URL, "model": NAME,
    #                                                "api_key_env": VAR} or {"weights": DIR}; {} = none
    decode_batch: int = 8  # images per VAE decode pass (a 512 px fp32 decode of many images at once is GBs)

    def __post_init__(self):
        for name in ("dtype", "vae_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"SD3Settings.{name}={getattr(self, name)!r}; valid: {', '.join(DTYPES)}")
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
SETTING_DEFAULTS.update({
    "stage1": {"prompt_files": _QUALITY_PROMPTS, "judges": PAPER_JUDGES},
    "stage_ocr": {"prompt_files": _COMPOSE_PROMPTS, "judges": PAPER_JUDGES},
    "stage_geneval": {"prompt_files": _COMPOSE_PROMPTS, "judges": PAPER_JUDGES},
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
        raise ValueError(f"{where}: expected {getattr(hint, '__name__', str(hint))}, got {value!r}")
    return value


def _prompt_file(split: str, path: str) -> str:
    p = Path(path)
    for candidate in (p, DATA_PROMPTS / p):
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(f"config field world_settings.prompt_files.{split}: no prompt file {path!r} (looked in "
                            f"the working directory and {DATA_PROMPTS})")


def _check_vlm(cfg: dict) -> None:
    known = {"endpoint", "model", "api_key_env", "weights", "timeout", "retries"}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"config field world_settings.vlm_judge: unknown keys {unknown}; valid: {sorted(known)}")
    if cfg and not (("endpoint" in cfg and "model" in cfg) or "weights" in cfg):
        raise ValueError("config field world_settings.vlm_judge: give endpoint and model (an OpenAI-compatible "
                         "server) or weights (a local model folder)")
    if "weights" in cfg and not Path(cfg["weights"]).is_dir():
        raise FileNotFoundError(f"config field world_settings.vlm_judge.weights: no folder {cfg['weights']!r}")


def _resolve(base: dict, setting: str, overrides: dict) -> tuple[SD3Settings, dict]:
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
    settings = SD3Settings(**values)
    plain = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(settings).items()}
    return settings, plain


def resolve_settings(arg, setting: str, overrides: dict, rewards=()) -> tuple[SD3Settings, dict]:
    """`SD3Settings` for "sd3:PATH" and a reward setting: SD3.5-Medium's defaults, the setting's prompts and
    judges, then a run's ``world_settings``. Raises ValueError / FileNotFoundError naming the setting at fault."""
    return _resolve({}, setting, overrides)


def resolve_tiny_settings(arg, setting: str, overrides: dict, rewards=()) -> tuple[SD3Settings, dict]:
    """As `resolve_settings` for "sd3-tiny": the tiny pipeline's sizes and model-free judges."""
    base = dict(TINY_DEFAULTS)
    settings, plain = _resolve(base, setting, {"judges": TINY_JUDGES, **overrides})
    return settings, plain

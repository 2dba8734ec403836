"""SD3 / SD3.5 as a `recast.world.World`: a diffusers `StableDiffusion3Pipeline` with cached text encoding.

Model space is the VAE latent space, normalised as diffusers does: x = (z - shift_factor) * scaling_factor, so
`decode(x)` runs `vae.decode(x / scaling_factor + shift_factor)`. Prompts are encoded once by the three text
encoders (two CLIP, one T5; `pipe.encode_prompt`) and cached on CPU, so a fixed prompt set costs one pass.
Rollouts are CFG-free by default, as in DiffusionNFT; `guided()` gives a transformer stand-in that applies
classifier-free guidance when `guidance_scale > 1`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from recast.sampling import PromptEmbeds
from recast.worlds.sd3.settings import DTYPES, SD3Settings

__all__ = ["SD3Settings", "SD3World", "GuidedTransformer", "load_sd3_world", "sd3_info", "DTYPES", "pipeline_parts"]



class GuidedTransformer:
    """Transformer stand-in with classifier-free guidance: v = v_uncond + s (v_cond - v_uncond).

    Called like `SD3Transformer2DModel` (so `recast.sampling` accepts it); runs one doubled batch.
    """

    def __init__(self, transformer, negative: PromptEmbeds, guidance_scale: float):
        self.transformer, self.negative, self.scale = transformer, negative, guidance_scale

    def __call__(self, *, hidden_states, timestep, encoder_hidden_states, pooled_projections, return_dict=False):
        B = hidden_states.shape[0]
        neg_h = self.negative.encoder_hidden_states.to(encoder_hidden_states).expand(B, -1, -1)
        neg_p = self.negative.pooled_projections.to(pooled_projections).expand(B, -1)
        v = self.transformer(hidden_states=torch.cat([hidden_states, hidden_states]),
                             timestep=torch.cat([timestep, timestep]),
                             encoder_hidden_states=torch.cat([neg_h, encoder_hidden_states]),
                             pooled_projections=torch.cat([neg_p, pooled_projections]), return_dict=False)[0]
        v_uncond, v_cond = v.chunk(2)
        return (v_uncond + self.scale * (v_cond - v_uncond),)


class SD3World:
    """A `World` over a `StableDiffusion3Pipeline`.

    Args:
        pipe: the pipeline (its modules are used in place).
        settings: loading and running options.
    """

    def __init__(self, pipe, settings: SD3Settings = SD3Settings()):
        from recast.worlds.sd3.rewards import SETTINGS

        self.pipe, self.settings = pipe, settings
        self.reward_settings: dict[str, tuple[str, ...]] = dict(SETTINGS)
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._prompt_sets: dict[str, list[str]] = {}
        self._judges: dict[str, object] = {}
        dt = DTYPES[settings.dtype]
        for name in ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"):
            module, want = getattr(pipe, name, None), DTYPES[settings.vae_dtype] if name == "vae" else dt
            if module is not None and module.dtype != want:
                module.to(want)
        if settings.gradient_checkpointing:
            pipe.transformer.enable_gradient_checkpointing()
        self.freeze()

    # ---------------------------------------------------------------- World protocol
    @property
    def transformer(self) -> torch.nn.Module:
        return self.pipe.transformer

    @property
    def device(self) -> torch.device:
        return self.pipe.transformer.device

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        side = self.settings.resolution // self.pipe.vae_scale_factor
        return (self.pipe.transformer.config.in_channels, side, side)

    def to(self, device: str | torch.device) -> SD3World:
        self.pipe.to(device)
        return self

    def freeze(self) -> None:
        for name in ("vae", "text_encoder", "text_encoder_2", "text_encoder_3"):
            module = getattr(self.pipe, name, None)
            if module is not None:
                module.requires_grad_(False).eval()

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], batch_size: int = 64) -> PromptEmbeds:
        """SD3 conditioning (B, L, D) and (B, P) in the transformer's dtype, on its device (no gradients).

        Each distinct prompt is encoded once and cached (on CPU); `batch_size` bounds one encoder pass. A prompt of
        a prompt split is encoded with its whole split, in file order, whatever was asked first; any other prompt on
        its own. An encoder's output carries the rounding of the batch it ran in, so this keeps every prompt's
        conditioning the same bits in a run and in its resumption, whatever each has cached. The text encoders run
        wherever they are, so after encoding a fixed prompt set they can be moved off the GPU
        (`offload_text_encoders`).
        """
        prompts = list(prompts)
        missing = list(dict.fromkeys(p for p in prompts if p not in self._cache))
        batches = []
        for split in self.settings.prompt_files:
            if missing and any(p in set(self.prompts(split)) for p in missing):
                todo = [p for p in dict.fromkeys(self.prompts(split)) if p not in self._cache]
                batches += [todo[i:i + batch_size] for i in range(0, len(todo), batch_size)]
                missing = [p for p in missing if p not in set(todo)]
        batches += [[p] for p in missing]
        for chunk in batches:
            hidden, _, pooled, _ = self.pipe.encode_prompt(
                prompt=chunk, prompt_2=None, prompt_3=None, device=self.pipe.text_encoder.device,
                do_classifier_free_guidance=False, max_sequence_length=self.settings.max_sequence_length)
            for p, h, q in zip(chunk, hidden.cpu(), pooled.cpu()):
                self._cache[p] = (h, q)
        dt = self.transformer.dtype
        hidden = torch.stack([self._cache[p][0] for p in prompts]).to(self.device, dt)
        pooled = torch.stack([self._cache[p][1] for p in prompts]).to(self.device, dt)
        return PromptEmbeds(hidden, pooled)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Latents (B, C, h, w) -> images (B, 3, h * f, w * f) float32 in [0, 1] (f = the VAE's scale factor)."""
        vae, n = self.pipe.vae, self.settings.decode_batch
        z = x.to(vae.device, vae.dtype) / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
        images = torch.cat([vae.decode(z[i:i + n], return_dict=False)[0] for i in range(0, len(z), n)])
        return (images.float() / 2 + 0.5).clamp(0, 1).to(x.device)

    def encode_images(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] -> model-space latents (a sample of the VAE posterior), float32; images of
        another size are resized (bicubic, antialiased) to the setting's resolution first."""
        vae, side = self.pipe.vae, self.settings.resolution
        if tuple(images.shape[-2:]) != (side, side):
            images = torch.nn.functional.interpolate(images.float(), size=(side, side), mode="bicubic",
                                                     antialias=True, align_corners=False).clamp(0, 1)
        dist = vae.encode((images * 2 - 1).to(vae.device, vae.dtype)).latent_dist
        z = dist.sample(generator) if generator is not None else dist.mode()
        return ((z - (vae.config.shift_factor or 0.0)) * vae.config.scaling_factor).float()

    def prompts(self, split: str) -> list[str]:
        if split not in self.settings.prompt_files:
            raise ValueError(f"unknown prompt split {split!r}; SD3Settings.prompt_files has "
                             f"{', '.join(self.settings.prompt_files)}")
        if split not in self._prompt_sets:
            from recast.worlds.sd3.prompts import load_prompts

            self._prompt_sets[split] = load_prompts(self.settings.prompt_files[split])
        return self._prompt_sets[split]

    def reward(self, name: str, device: str | torch.device):
        import recast.worlds.sd3.rewards as rewards

        fn = rewards.get(name)(device, root=self.settings.reward_root)
        factor = self.settings.reward_scale.get(name)
        if factor is None:
            return fn

        def scaled(images, prompts):  # the setting's scale for this reward (world_settings.reward_scale)
            return fn(images, prompts) * factor

        return scaled

    def load_judges(self, device: str | torch.device) -> None:
        """Load every held-out judge now (the trainer calls this before training, so a judge whose weights are
        missing stops the run before any compute instead of at its first evaluation)."""
        for name in self.settings.judges:
            if name not in self._judges:
                self._judges[name] = self.reward(name, device)

    def evaluate(self, images: torch.Tensor, prompts: list[str], *, seed: int = 0) -> dict[str, float]:
        """Mean of each held-out judge in `settings.judges`, and the within-prompt pixel diversity."""
        from recast.worlds.sd3.rewards import group_diversity

        for name in self.settings.judges:  # judge models load once, on first use
            if name not in self._judges:
                self._judges[name] = self.reward(name, images.device)
        out = {name: float(self._judges[name](images, prompts).float().mean()) for name in self.settings.judges}
        if len(set(prompts)) < len(prompts):
            out["diversity"] = float(group_diversity(images, prompts))
        return out

    @property
    def pairwise_available(self) -> bool:
        """Whether a pairwise judge is configured (``settings.vlm_judge``): `prefer` needs one."""
        return bool(self.settings.vlm_judge)

    def prefer(self, a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> list[int | None]:
        """The pairwise VLM judge's verdict per prompt: +1 (A better), -1 (B better), 0 (tie), None (abstained).

        Raises:
            TypeError: no ``vlm_judge`` is configured in the world settings.
        """
        if not self.pairwise_available:
            raise TypeError("no pairwise judge: set world_settings.vlm_judge (an OpenAI-compatible endpoint and model, "
                            "or local weights)")
        if "vlm" not in self._judges:
            from recast.worlds.sd3.vlm_judge import OpenAIChatBackend, PairwiseVLMJudge, TransformersBackend

            cfg = dict(self.settings.vlm_judge)
            if "weights" in cfg:
                backend = TransformersBackend(cfg["weights"], device=self.device)
            else:
                backend = OpenAIChatBackend(cfg["endpoint"], cfg["model"], api_key_env=cfg.get("api_key_env"),
                                            timeout=float(cfg.get("timeout", 60.0)),
                                            max_retries=int(cfg.get("retries", 3)))
            self._judges["vlm"] = PairwiseVLMJudge(backend, max_failures=cfg.get("max_failures", 3),
                                                   deadline=cfg.get("deadline"))
        return [v.verdict for v in self._judges["vlm"].judge(a_images, b_images, prompts)]

    # ---------------------------------------------------------------- SD3 extras
    def offload_text_encoders(self, device: str | torch.device = "cpu") -> None:
        """Move the three text encoders to `device` (their prompts stay cached): frees ~11 GB of GPU in bf16."""
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3"):
            if getattr(self.pipe, name, None) is not None:
                getattr(self.pipe, name).to(device)

    def guided(self, transformer=None):
        """The transformer to sample with: itself when CFG-free, else a `GuidedTransformer`."""
        transformer = transformer if transformer is not None else self.transformer
        if self.settings.guidance_scale == 1.0:
            return transformer
        negative = self.encode_prompts([self.settings.negative_prompt])
        return GuidedTransformer(transformer, negative, self.settings.guidance_scale)


def _not_a_pipeline(path: Path) -> FileNotFoundError:
    return FileNotFoundError(f"{path} is not a diffusers pipeline folder (no model_index.json); save one with "
                             "`StableDiffusion3Pipeline.save_pretrained` or `huggingface-cli download "
                             "stabilityai/stable-diffusion-3.5-medium --local-dir DIR`")


def _check_components(path: Path, settings: SD3Settings) -> None:
    """Every component folder that model_index.json lists is there (a missing vae/ is named, not a config error)."""
    import json

    try:
        index = json.loads((path / "model_index.json").read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path / 'model_index.json'} is not readable JSON ({err})") from None
    skip = {"text_encoder_3", "tokenizer_3"} if settings.drop_t5 else set()
    missing = [name for name, spec in index.items() if not name.startswith("_") and isinstance(spec, list)
               and spec[0] is not None and name not in skip and not (path / name).is_dir()]
    if missing:
        raise FileNotFoundError(f"{path} lists {', '.join(missing)} in model_index.json but has no such folder; "
                                "copy the complete pipeline folder (or drop_t5 for a folder without the T5 encoder)")


def sd3_info(arg: str | None = None):
    """Static `WorldInfo` of "sd3:PATH" and "sd3-tiny": the SD3 reward registry (each name also as rank:NAME) and
    the default prompt splits; no weights read. A local folder without model_index.json is refused."""
    from recast.world import WorldInfo
    import recast.worlds.sd3.rewards as rewards

    if arg is not None and Path(arg).exists() and not (Path(arg) / "model_index.json").is_file():
        raise _not_a_pipeline(Path(arg))
    names = rewards.names()
    return WorldInfo(dict(rewards.SETTINGS), (*names, *(f"rank:{n}" for n in names)),
                     tuple(SD3Settings().prompt_files))


def load_sd3_world(arg: str, *, settings: SD3Settings = SD3Settings(), allow_download: bool | None = None,
                   **_) -> SD3World:
    """Load a `StableDiffusion3Pipeline` from a local folder (or a hub id where downloads are allowed).

    Args:
        arg: a diffusers pipeline folder (model_index.json inside) or a hub id such as
            "stabilityai/stable-diffusion-3.5-medium".
        settings: dtypes, resolution, prompt files, reward folder.
        allow_download: let diffusers fetch a hub id; defaults to the env var RECAST_ALLOW_DOWNLOAD=1 (off), so
            tests and offline machines never touch the network.

    Raises:
        FileNotFoundError: a local folder without model_index.json, or a hub id that is not cached while
            downloads are off (the message says how to get the weights).
    """
    from diffusers import AutoencoderKL, StableDiffusion3Pipeline

    if allow_download is None:
        allow_download = os.environ.get("RECAST_ALLOW_DOWNLOAD") == "1"
    if not allow_download:  # no lookup over HTTPS at all, not even for a cached hub id
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    path = Path(arg)
    if path.exists() and not (path / "model_index.json").is_file():
        raise _not_a_pipeline(path)
    if path.exists():
        _check_components(path, settings)
    extra = {"text_encoder_3": None, "tokenizer_3": None} if settings.drop_t5 else {}
    try:
        with warnings.catch_warnings():  # diffusers >= 0.36 renames torch_dtype to dtype; older ones know only this
            warnings.filterwarnings("ignore", message=".*use `dtype` instead.*")
            # the VAE loads on its own in its dtype: loading it in bf16 with the rest and upcasting later would keep
            # bf16-rounded weights
            vae = AutoencoderKL.from_pretrained(arg, subfolder="vae", torch_dtype=DTYPES[settings.vae_dtype],
                                                local_files_only=not allow_download)
            pipe = StableDiffusion3Pipeline.from_pretrained(arg, vae=vae, torch_dtype=DTYPES[settings.dtype],
                                                            local_files_only=not allow_download, **extra)
    except OSError as e:
        if path.exists():
            raise
        raise FileNotFoundError(f"SD3 weights {arg!r} are not on this machine and downloads are off; download them "
                                "with `huggingface-cli download <id> --local-dir DIR` and use sd3:DIR, or set "
                                "RECAST_ALLOW_DOWNLOAD=1") from e
    return SD3World(pipe, settings)


def pipeline_parts(pipeline, *, max_sequence_length: int = 256, resolution: int | None = None):
    """(encode, decode, encode_images) of a ``StableDiffusion3Pipeline`` through this world, its dtypes kept
    (what `recast.profile.build_profile` calls, through `recast.world.pipeline_parts`)."""
    names = {v: k for k, v in DTYPES.items()}
    side = resolution or int(pipeline.default_sample_size * pipeline.vae_scale_factor)
    settings = SD3Settings(resolution=side, max_sequence_length=int(max_sequence_length),
                           dtype=names[pipeline.transformer.dtype], vae_dtype=names[pipeline.vae.dtype])
    world = SD3World(pipeline, settings)
    return world.encode_prompts, world.decode, world.encode_images

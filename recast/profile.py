"""Make the paper's density-ratio profile for your own model, rewards and sampler grid (docs/credit.md, "Make a table
for your own model").

    from recast.profile import build_profile, grid_sigmas
    sigmas = grid_sigmas(pipe.scheduler, num_steps=25)              # or sigmas=..., or timesteps=...
    profile = build_profile(pipe, {"aesthetic": my_aesthetic, "ocr": my_ocr}, prompts, proposals=images,
                            sigmas=sigmas, num_continuations=16, out="profile.npz")
    table = recast.archives.table_from_profile(profile, [1.0, 2.0])   # then recast.checks.check_table, Credit(...)

The estimator is `recast.informativeness.ratios.density_ratios` (docs/method.md §0): each proposal noised to every
step's destination σ, continued M times by ancestral steps of your transformer, every reward scored on the ends. This
module only adapts what a user has (a diffusers pipeline, or a transformer with encode and decode functions, plain
reward callables ``(images, prompts) -> scores``, any scheduler's grid) to it, and records the cost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from recast.archives import DensityProfile, _check_sigmas, save_profile

__all__ = ["grid_sigmas", "build_profile", "resolve_reward", "read_proposal_folder"]


def resolve_reward(spec, device="cpu") -> Callable:
    """A reward callable from a callable (returned as it is) or a ``"package.module:factory"`` string.

    The factory is imported and called as ``factory(device)`` when it takes a parameter, else ``factory()``; what it
    returns must be a callable ``(images, prompts) -> scores``.

    Raises:
        ValueError: a malformed spec, a module or attribute that does not import, or a factory that returns no callable.
    """
    if callable(spec):
        return spec
    import importlib
    import inspect

    text = str(spec)
    module, _, attr = text.partition(":")
    if not module or not attr or not all(p.isidentifier() for p in module.split(".") + attr.split(".")):
        raise ValueError(f"reward {text!r}: expected a callable or 'package.module:factory'")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"reward {text!r} does not import: {err}") from None
    if not callable(obj):
        raise ValueError(f"reward {text!r}: {attr} is not callable")
    try:
        takes = [p for p in inspect.signature(obj).parameters.values()
                 if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        takes = []
    fn = obj(device) if takes else obj()
    if not callable(fn):
        raise ValueError(f"reward {text!r}: the factory returned {type(fn).__name__}, not a callable "
                         "(images, prompts) -> scores")
    return fn


def grid_sigmas(scheduler=None, *, num_steps: int | None = None, sigmas=None, timesteps=None,
                num_train_timesteps: int = 1000) -> np.ndarray:
    """The sampler's grid (T + 1,) float64 from 1 (noise) down to 0, as a profile and a weight table store it.

    Give exactly one of:
        scheduler (with num_steps): a diffusers flow-matching scheduler; its ``set_timesteps(num_steps)`` is called
            and its ``sigmas`` read (FlowMatchEulerDiscreteScheduler and its shift included).
        sigmas: the grid itself, (T + 1,) ending at 0, or the T step starts (0 is appended).
        timesteps: the T step starts as timesteps, σ · num_train_timesteps (Flow-Factory's and diffusers' SD3: 1000).

    Raises:
        ValueError: not exactly one source, or a grid that does not fall strictly from 1 to 0.
    """
    given = [x is not None for x in (scheduler, sigmas, timesteps)]
    if sum(given) != 1:
        raise ValueError("give exactly one of scheduler (with num_steps), sigmas or timesteps")
    if scheduler is not None:
        if num_steps is None or int(num_steps) < 1:
            raise ValueError("grid_sigmas(scheduler) needs num_steps >= 1")
        scheduler.set_timesteps(int(num_steps))
        if getattr(scheduler, "sigmas", None) is None:
            raise ValueError(f"{type(scheduler).__name__} has no sigmas after set_timesteps: pass sigmas= instead")
        s = torch.as_tensor(scheduler.sigmas).double().cpu().numpy()
    elif sigmas is not None:
        s = torch.as_tensor(sigmas).double().cpu().numpy().reshape(-1)
    else:
        s = torch.as_tensor(timesteps).double().cpu().numpy().reshape(-1) / float(num_train_timesteps)
    if s.size and s[-1] != 0.0:
        s = np.append(s, 0.0)
    return _check_sigmas(s, "the sampler's grid")


class _Callables:
    """The part of the `World` protocol the estimator reads, over plain functions."""

    def __init__(self, transformer, encode, decode, rewards: Mapping[str, Callable]):
        self.transformer, self._encode, self._decode, self._rewards = transformer, encode, decode, dict(rewards)

    def encode_prompts(self, prompts):
        return self._encode(list(prompts))

    def decode(self, x):
        return self._decode(x)

    def reward(self, name, device):
        return self._rewards[name]


def read_proposal_folder(folder: str | Path) -> tuple[list, list[str]]:
    """(images as float tensors (3, H, W) in [0, 1], prompts) of a proposal folder's ``prompts.jsonl``.

    Raises:
        ValueError / FileNotFoundError: a missing or malformed prompts.jsonl, a missing or unreadable image.
    """
    import numpy as np
    import torch
    from PIL import Image

    root = Path(folder)
    index = root / "prompts.jsonl"
    if not index.is_file():
        raise FileNotFoundError(f"--proposal {root}: no prompts.jsonl (one {{\"file\": ..., \"prompt\": ...}} per line)")
    images, prompts = [], []
    for n, line in enumerate(index.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{index}:{n}: not JSON") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("file"), str) or not isinstance(rec.get("prompt"), str):
            raise ValueError(f"{index}:{n}: expected {{\"file\": \"NAME.png\", \"prompt\": \"...\"}}")
        path = (root / rec["file"]).resolve()
        if root.resolve() not in path.parents or not path.is_file():
            raise ValueError(f"{index}:{n}: {rec['file']!r} is not a file inside {root}")
        try:
            with Image.open(path) as im:
                arr = np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
        except OSError as err:
            raise ValueError(f"{path}: not a readable image ({err})") from None
        images.append(torch.from_numpy(arr).permute(2, 0, 1).contiguous())
        prompts.append(rec["prompt"])
    if not prompts:
        raise ValueError(f"{index} lists no images")
    return images, prompts


@torch.no_grad()
def build_profile(pipeline=None, rewards: Mapping[str, Callable] | None = None, prompts: Sequence[str] | None = None,
                  *, proposals=None, latents: torch.Tensor | None = None, transformer=None,
                  encode: Callable | None = None, decode: Callable | None = None,
                  encode_images: Callable | None = None, scheduler=None, num_steps: int | None = None, sigmas=None,
                  timesteps=None, num_continuations: int = 16, num_base: int = 8, substeps: int = 8, seed: int = 0,
                  offsets: Mapping[str, float] | None = None, batch_size: int = 64, max_sequence_length: int = 256,
                  out: str | Path | None = None, overwrite: bool = False, progress: bool = True,
                  meta: dict | None = None) -> DensityProfile:
    """The density-ratio profile of your model's rewards on proposal images (the paper's input to W).

    Args:
        pipeline: a diffusers ``StableDiffusion3Pipeline`` (its transformer, text encoders and VAE are used as they
            are, in their dtypes); or None with ``transformer``, ``encode`` and ``decode``.
        rewards: reward name → a callable ``(images (B, 3, H, W) float in [0, 1], prompts) -> scores (B,)``, e.g. the
            reward functions of your own trainer, or a ``"package.module:factory"`` string (`resolve_reward`).
            Scores must be >= 0 (or be made so by ``offsets``).
        prompts: one prompt per proposal (repeats allowed).
        proposals: images (N, 3, H, W) in [0, 1] (any strong generator's, or your model's own samples), or a folder
            with ``prompts.jsonl`` (then ``prompts`` comes from it). Or ``latents``: (N, ...) in model space.
        transformer, encode, decode, encode_images: without a pipeline: the velocity model (called as diffusers'
            SD3 transformer is), ``encode(prompts) -> recast.world.PromptEmbeds``, ``decode(latents) -> images`` and,
            for ``proposals`` given as images, ``encode_images(images) -> latents``.
        scheduler + num_steps, sigmas or timesteps: the sampler's grid your trainer trains on (`grid_sigmas`).
        num_continuations: M continuations per noised proposal (16 or more: below that the Monte-Carlo noise can
            swamp a column, which `recast.checks.degenerate_columns` reports). num_base: the model's own samples per
            prompt for E[r | prompt]. substeps: ancestral steps per grid step.
        seed: seeds the forward noise and the continuations. offsets: reward → a constant added to its scores.
        batch_size: states per transformer pass. max_sequence_length: T5 tokens (pipeline only).
        out: write the archive there (refused if it exists, unless ``overwrite``). progress: a tqdm bar per column.
        meta: extra entries for the archive's ``recast_meta``.

    Returns:
        the `DensityProfile`; its meta holds M, the grid, the seed and ``cost``: transformer passes, reward queries,
        wall seconds and processes.

    Raises:
        ValueError / FileExistsError before any model call: a missing part, a bad grid, one prompt per proposal not
        given, a reward that is not callable, an existing ``out``.
    """
    grid = grid_sigmas(scheduler, num_steps=num_steps, sigmas=sigmas, timesteps=timesteps)
    if not rewards or not all(callable(f) or isinstance(f, str) for f in rewards.values()):
        raise ValueError("rewards must map each reward name to a callable (images, prompts) -> scores or a "
                         "'package.module:factory' string")
    target = None
    if out is not None:
        from recast.io import check_target

        target = check_target(Path(out))
        if target.exists() and not overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True to replace it")
    if isinstance(proposals, (str, Path)):
        images, folder_prompts = read_proposal_folder(proposals)
        proposals, prompts = torch.stack(images), prompts or folder_prompts
    if (proposals is None) == (latents is None):
        raise ValueError("give exactly one of proposals (images or a folder) or latents")
    n = int((proposals if proposals is not None else latents).shape[0])
    if prompts is None or len(prompts) != n:
        raise ValueError(f"need one prompt per proposal: {n} proposals, "
                         f"{'no' if prompts is None else len(prompts)} prompts")
    if pipeline is not None:
        side = int(proposals.shape[-1]) if proposals is not None else None
        from recast.world import pipeline_parts

        encode, decode, encode_images = pipeline_parts(pipeline, max_sequence_length=max_sequence_length,
                                                       resolution=side)
        transformer = pipeline.transformer
    missing = [k for k, v in (("transformer", transformer), ("encode", encode), ("decode", decode)) if v is None]
    if proposals is not None and encode_images is None:
        missing.append("encode_images")
    if missing:
        raise ValueError(f"without a pipeline, give {', '.join(missing)}")
    device = next(transformer.parameters()).device
    rewards = {name: resolve_reward(f, device) for name, f in rewards.items()}
    if latents is None:  # a pipeline's VAE encodes to its posterior's mode: the same latents on every call
        latents = encode_images(proposals.float().clamp(0, 1))
    latents = latents.to(device=device, dtype=torch.float32)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(grid), desc="profile", unit="column")
    start = time.perf_counter()
    record = {"builder": "recast.profile.build_profile", "rewards": list(rewards), "grid": grid.tolist()}
    record.update(meta or {})
    try:
        prof = _estimate(_Callables(transformer, encode, decode, rewards), list(rewards), list(prompts), latents,
                         grid, num_continuations, num_base, substeps, seed, offsets, batch_size, record,
                         bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    cost = dict(prof.meta["cost"])
    cost.update({"transformer_passes": cost.pop("model_evaluations"), "seconds": round(time.perf_counter() - start, 2),
                 "processes": 1})
    prof = DensityProfile(prof.sigmas, prof.ratios, {**prof.meta, "cost": cost})
    if target is not None:
        save_profile(prof, target)
    return prof


def _estimate(world, names, prompts, latents, grid, M, num_base, substeps, seed, offsets, batch_size, meta, tick):
    from recast.informativeness.ratios import density_ratios

    return density_ratios(world, names, prompts, latents, sigmas=torch.from_numpy(grid), num_continuations=M,
                          num_base=num_base, substeps=substeps, seed=seed, offsets=dict(offsets or {}),
                          batch_size=batch_size, meta=meta, progress=(lambda _line: tick(1)) if tick else None)

"""The world seam: what the trainer needs from a text-to-image model and its rewards, and a registry of worlds.

A *world* bundles a flow-matching transformer with its text conditioning, its decoder to RGB, its prompt sets, its
training rewards and its held-out judges. The trainer, the config and the generic notebooks talk to a world only
through the `World` protocol below and get one from `load_world(spec)`; they never import a world package.

Specs (the part before the first ``:`` picks the factory, the rest is its argument):

    "digits:data/digit_base"   the digit world saved at that folder        (recast.worlds.digits)
    "tiny"                     a random tiny digit world, for tests         (recast.worlds.digits)
    "sd3:/path/or/hub-id"      a diffusers StableDiffusion3Pipeline         (recast.worlds.sd3)
    "sd3-tiny"                 a random tiny SD3 pipeline, for tests        (recast.worlds.sd3.tiny)

Factories are registered as ``"module:attribute"`` strings and imported on first use, so importing this module
imports no world package (a test checks this). Each prefix also has a cheap static description, `world_info(spec)`
(its reward settings, reward names and prompt splits), read without loading any model weights, so a config is
checked before any compute.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from recast.sampling import PromptEmbeds

__all__ = ["RewardFn", "World", "WorldInfo", "register_world", "world_prefixes", "load_world", "world_info",
           "world_settings",
           "parse_spec", "sample_prompts", "shard_seed"]

RewardFn = Callable[[torch.Tensor, list[str]], torch.Tensor]  # (images (B, 3, H, W) in [0, 1], prompts) -> (B,)


@runtime_checkable
class World(Protocol):
    """Everything the trainer uses from a world, and nothing more.

    Attributes:
        transformer: the trained module, called as `recast.sampling.predict_velocity(transformer, x, sigma, embeds)`
            (an SD3Transformer2DModel or anything with its call signature).
        sample_shape: (C, H, W) of one model-space sample (pixels for the digit world, VAE latents for SD3).
        reward_settings: named reward sets, e.g. {"compose": ("digit", "color", ...)}; every name is valid for
            `reward`.
    """

    transformer: torch.nn.Module
    sample_shape: tuple[int, int, int]
    reward_settings: dict[str, tuple[str, ...]]

    def encode_prompts(self, prompts: Sequence[str]) -> PromptEmbeds:
        """Conditioning for B prompts: encoder_hidden_states (B, L, D), pooled_projections (B, P)."""

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Model-space samples (B, C, H, W) -> RGB images (B, 3, H', W') in [0, 1]."""

    def to(self, device: str | torch.device) -> World:
        """Move every module to `device` (in place); returns self."""

    def freeze(self) -> None:
        """Stop gradients into everything but `transformer` (text encoders, VAE)."""

    def prompts(self, split: str) -> list[str]:
        """The prompt texts of a split ("train" or "test"), in a fixed order; ValueError for an unknown split."""

    def reward(self, name: str, device: str | torch.device) -> RewardFn:
        """A training reward by name (heavy setup happens here); ValueError naming the valid names."""

    def evaluate(self, images: torch.Tensor, prompts: list[str], *, seed: int = 0) -> dict[str, float]:
        """Held-out judges of images (B, 3, H, W) in [0, 1]: {judge name: value}; `seed` fixes any sampling inside."""


@dataclass(frozen=True)
class WorldInfo:
    """What a world offers, known without loading it (no model weights read).

    Attributes:
        reward_settings: named reward sets, as `World.reward_settings`.
        reward_names: every reward name `World.reward` accepts.
        splits: prompt splits `World.prompts` accepts.
        setting_budgets: a setting's default budgets λ, one per reward of the setting, where they are not equal
            (a world's optional ``setting_budgets`` attribute; `recast.config.resolve_budgets` reads them).
        profiles: the world's committed density-ratio profiles (`recast.archives`), one per sampler grid.
    """

    reward_settings: dict[str, tuple[str, ...]]
    reward_names: tuple[str, ...]
    splits: tuple[str, ...] = ("train", "test")
    setting_budgets: dict[str, tuple[float, ...]] = field(default_factory=dict)
    profiles: tuple[str, ...] = ()  # committed density-ratio profiles of this model (paths), which method "recast"
    #                                 reads when a run names no weight_file (`recast.config.resolve_weight_file`)


# prefix -> factory or "module:attribute"; the factory is called as factory(arg) with arg the text after "prefix:"
# (None for a bare prefix) and returns a World.
_REGISTRY: dict[str, Callable[[str | None], World] | str] = {
    "digits": "recast.worlds.digits.world:load",
    "tiny": "recast.worlds.digits.world:tiny",
    "sd3": "recast.worlds.sd3:load_sd3_world",
    "sd3-tiny": "recast.worlds.sd3.tiny:tiny_sd3_world",
}
# prefix -> `info(arg) -> WorldInfo` or "module:attribute"; cheap: no weights are read
_INFO: dict[str, Callable[[str | None], WorldInfo] | str] = {
    "digits": "recast.worlds.digits.world:info",
    "tiny": "recast.worlds.digits.world:info",
    "sd3": "recast.worlds.sd3.world:sd3_info",
    "sd3-tiny": "recast.worlds.sd3.world:sd3_info",
}
_NEEDS_ARG = {"digits", "sd3"}  # prefixes whose spec must name a path (or hub id)
# prefix -> `resolve(arg, setting, overrides, rewards) -> (settings object, plain dict)` or "module:attribute": the
# world's own settings for a reward setting, with a run's ``world_settings`` over them, checked before loading
_SETTINGS: dict[str, Callable | str] = {
    "sd3": "recast.worlds.sd3.settings:resolve_settings",
    "sd3-tiny": "recast.worlds.sd3.settings:resolve_tiny_settings",
}

# diffusers pipeline class name -> `parts(pipeline, max_sequence_length, resolution) -> (encode, decode,
# encode_images)` or "module:attribute": how `recast.profile.build_profile` drives a pipeline it is handed
_PIPELINE_PARTS: dict[str, Callable | str] = {
    "StableDiffusion3Pipeline": "recast.worlds.sd3.world:pipeline_parts",
}


def pipeline_parts(pipeline, *, max_sequence_length: int = 256, resolution: int | None = None):
    """(encode, decode, encode_images) for a diffusers pipeline, from the world that knows its class.

    Raises:
        TypeError: no world handles this pipeline's class (the message names the ones that are handled and the
            transformer/encode/decode route that needs none).
    """
    name = type(pipeline).__name__
    if name not in _PIPELINE_PARTS:
        raise TypeError(f"no world drives a {name}: pipelines handled: {', '.join(sorted(_PIPELINE_PARTS))}; for "
                        "another model pass transformer=, encode= and decode= (and encode_images= for image "
                        "proposals) instead of the pipeline")
    return _resolve(_PIPELINE_PARTS[name])(pipeline, max_sequence_length=max_sequence_length, resolution=resolution)


def register_world(prefix: str, factory: Callable[[str | None], World] | str, *, needs_arg: bool = False,
                   info: Callable[[str | None], WorldInfo] | str | None = None) -> None:
    """Add (or replace) a world factory under `prefix`.

    Args:
        prefix: the spec's text before ":" (no ":" or whitespace in it).
        factory: `factory(arg) -> World`, or a lazy "module:attribute" string naming one.
        needs_arg: the spec must carry an argument ("prefix:ARG").
        info: `info(arg) -> WorldInfo` (or a lazy string); without it, `world_info` builds the world once to read
            its reward settings (fine for cheap worlds such as a test's fake one).
    """
    if not prefix or ":" in prefix or any(c.isspace() for c in prefix):
        raise ValueError(f"world prefix must be non-empty without ':' or whitespace, got {prefix!r}")
    _REGISTRY[prefix] = factory
    _INFO.pop(prefix, None)
    if info is not None:
        _INFO[prefix] = info
    _NEEDS_ARG.discard(prefix)
    if needs_arg:
        _NEEDS_ARG.add(prefix)


def world_prefixes() -> tuple[str, ...]:
    """Registered spec prefixes."""
    return tuple(_REGISTRY)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split a world spec into (prefix, argument), validating the prefix.

    Raises:
        ValueError: empty spec, unknown prefix, or a missing/extra argument; the message lists the valid prefixes.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"world spec must be a non-empty string, got {spec!r}; valid prefixes: {_valid()}")
    prefix, sep, arg = spec.partition(":")
    if prefix not in _REGISTRY:
        raise ValueError(f"unknown world spec {spec!r}; valid prefixes: {_valid()}")
    if prefix in _NEEDS_ARG and not arg:
        raise ValueError(f"world spec {spec!r} needs a path: {prefix}:PATH (valid prefixes: {_valid()})")
    return prefix, (arg if sep else None)


def _valid() -> str:
    return ", ".join(f"{p}:PATH" if p in _NEEDS_ARG else p for p in _REGISTRY)


def _resolve(factory: Callable | str) -> Callable:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def _looks_like_hub_id(arg: str) -> bool:
    """'org/name' with no other slashes and no leading '.', '/' or '~' (diffusers' own rule of thumb)."""
    return arg.count("/") == 1 and not arg.startswith((".", "/", "~")) and all(arg.split("/"))


def load_world(spec: str, **kwargs) -> World:
    """Build the world a spec names (see the module docstring); keyword arguments go to its factory.

    Raises:
        ValueError: unknown prefix or malformed spec (naming the valid prefixes).
        FileNotFoundError: the spec names a path that does not exist (hub ids are allowed for "sd3").
    """
    prefix, arg = _checked(spec)
    world = _resolve(_REGISTRY[prefix])(arg, **kwargs)
    if not isinstance(world, World):
        raise TypeError(f"world factory for {prefix!r} returned {type(world).__name__}, which is not a World")
    return world


def world_info(spec: str) -> WorldInfo:
    """The static description of the world a spec names, without loading its weights.

    Raises:
        ValueError / FileNotFoundError: as `load_world` (bad spec, missing path), before anything is built.
    """
    prefix, arg = _checked(spec)
    if prefix in _INFO:
        return _resolve(_INFO[prefix])(arg)
    world = load_world(spec)  # a registered world without a static description: ask the world itself
    return WorldInfo({k: tuple(v) for k, v in world.reward_settings.items()},
                     tuple(dict.fromkeys(n for v in world.reward_settings.values() for n in v)),
                     setting_budgets={k: tuple(v) for k, v in getattr(world, "setting_budgets", {}).items()})


def world_settings(spec: str, setting: str, overrides: dict | None = None, *, rewards=()) -> tuple[object, dict]:
    """The world's own settings for a reward setting, with ``overrides`` (a run's ``world_settings``) over them.

    Returns:
        (the settings object the world's factory takes as ``settings=``, or None for a world without settings;
        the same as plain data).

    Raises:
        ValueError / FileNotFoundError: an unknown setting name, a wrong type or a missing file, naming it; any
            ``world_settings`` at all for a world that takes none.
    """
    prefix, arg = _checked(spec)
    overrides = dict(overrides or {})
    if prefix not in _SETTINGS:
        if overrides:
            raise ValueError(f"config field world_settings: world {spec!r} takes no world settings, got "
                             f"{sorted(overrides)}")
        return None, {}
    return _resolve(_SETTINGS[prefix])(arg, setting, overrides, tuple(rewards))


def _checked(spec: str) -> tuple[str, str | None]:
    """`parse_spec` plus the path check: FileNotFoundError for a missing path (hub ids are allowed for "sd3")."""
    prefix, arg = parse_spec(spec)
    if arg is not None and prefix in _NEEDS_ARG and not Path(arg).exists():
        if not (prefix == "sd3" and _looks_like_hub_id(arg)):
            raise FileNotFoundError(f"world spec {spec!r}: no such path {arg!r} (valid prefixes: {_valid()})")
    return prefix, arg


def sample_prompts(world: World, n: int, *, split: str = "train", generator: torch.Generator | None = None,
                   rank: int = 0, num_ranks: int = 1, shard_seed: int = 0) -> list[str]:
    """`n` prompts drawn uniformly with replacement from `world.prompts(split)`, or, with several processes, from
    this process's part of the pool.

    With ``num_ranks`` > 1 the pool is dealt into ``num_ranks`` disjoint parts by a permutation that every process
    makes alike from ``shard_seed`` (the trainer derives it from the run's seed and the iteration), and rank ``r``
    draws from part ``r`` only: no two processes draw the same prompt in one iteration, and each prompt keeps the
    chance 1 / len(pool) of filling any slot. With one process the pool is used as it is and the draw is the same one
    `torch.randint` of shape (n,) as the digit world's own `sample_prompts`, so a one-process run's RNG stream is
    unchanged by going through the protocol or by the sharding.

    Args:
        world: the world whose prompts are drawn.
        n: prompts to draw (this process's).
        split: "train" or "test".
        generator: this process's own generator (the draw within its part).
        rank, num_ranks: this process and how many there are (0 <= rank < num_ranks).
        shard_seed: seeds the partition; the same on every process.

    Raises:
        ValueError: an empty split; a pool with fewer prompts than processes (no partition leaves each one a prompt);
            a rank outside 0..num_ranks-1.
    """
    pool = world.prompts(split)
    if not pool:
        raise ValueError(f"world has no prompts in split {split!r}")
    if not (isinstance(num_ranks, int) and num_ranks >= 1 and isinstance(rank, int) and 0 <= rank < num_ranks):
        raise ValueError(f"rank must lie in 0..num_ranks-1 with num_ranks >= 1, got rank={rank!r}, "
                         f"num_ranks={num_ranks!r}")
    if num_ranks > 1:
        if len(pool) < num_ranks:
            raise ValueError(f"the {split!r} prompts ({len(pool)}) cannot be split over {num_ranks} processes: each "
                             "needs at least one; use fewer processes or more prompts")
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(int(shard_seed)))
        pool = [pool[i] for i in order[rank::num_ranks].tolist()]
    idx = torch.randint(len(pool), (n,), generator=generator)
    return [pool[i] for i in idx.tolist()]


def shard_seed(seed: int, iteration: int) -> int:
    """The seed of iteration ``iteration``'s prompt partition (`sample_prompts`), from the run's seed alone, so every
    process, a resumed one included, deals the same parts without any state being saved."""
    return (int(seed) * 1_000_003 + 700_001 + int(iteration) * 2_654_435_761) % 2**63

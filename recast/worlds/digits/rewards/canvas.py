"""What every rule-based digit reward reads first: the parsed prompts and the ink above the canvas' background.

A leaf module, so that `digit` and `specks` can both build on it without importing each other at load time.
"""

from __future__ import annotations

import functools

import torch

from recast.worlds.digits import data

__all__ = ["above_background"]


@functools.lru_cache(maxsize=4096)
def _spec(text: str) -> data.PromptSpec:
    return data.parse_prompt(text)


def _specs(prompts: list[str], B: int) -> list[data.PromptSpec]:
    if len(prompts) != B:
        raise ValueError(f"got {B} images but {len(prompts)} prompts")
    return [_spec(p) for p in prompts]


def above_background(images: torch.Tensor) -> torch.Tensor:
    """Ink intensity above the canvas' own background ``(B, H, W)``: ``I`` less its median, clipped at 0. A uniform
    grey wash (the fade defect, which ``contrast`` measures) then changes neither edges nor stray ink."""
    I = data.ink_intensity(images)
    return (I - I.flatten(1).median(1).values[:, None, None]).clamp_min(0.0)

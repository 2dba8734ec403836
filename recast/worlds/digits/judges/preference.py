"""Pairwise preference judge: the digit world's analogue of the paper's LLM-as-a-Judge.

Scoring of two images ``a``, ``b`` of the same prompt (and seed), in order:

1. prompt faithfulness: the number of attributes (digit, colour, position, size) that the held-out attribute judge
   finds right; more wins;
2. quality, measured independently of the training rewards: the distance in judge-feature space from the image to
   its nearest of ``N_REFERENCE`` real canvases of the same prompt rendered from the judge glyph split (fixed seed per
   prompt); smaller wins;
3. a tie when the faithfulness counts are equal and the quality distances differ by less than ``TIE_TOLERANCE``
   (identical images always tie).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from recast.worlds.digits import data
from recast.worlds.digits.judges.attributes import judge_attributes
from recast.worlds.digits.judges.features import judge_features

N_REFERENCE: int = 16  # real canvases per prompt for the quality term
TIE_TOLERANCE: float = 0.05  # judge-feature distance below which two qualities are equal


@dataclass(frozen=True)
class WinRate:
    """Aggregate of pairwise verdicts of A against B; ``win_rate = (wins + ties / 2) / n``."""

    wins: int
    losses: int
    ties: int
    win_rate: float


_REFERENCE_CACHE: dict[tuple[str, str], torch.Tensor] = {}  # (palette, prompt) -> (N_REFERENCE, D) real features


def _reference_features(prompts: list[str]) -> torch.Tensor:
    """Judge features ``(B, N_REFERENCE, D)`` of real judge-split canvases per prompt (seeded by the prompt's index
    in ``all_specs``, so independent of batch composition), drawn in the current palette; computed once per palette
    and prompt, in one forward pass."""
    palette = data.palette_name()
    missing = sorted({p for p in prompts if (palette, p) not in _REFERENCE_CACHE})
    if missing:
        order = data.all_specs()
        real = torch.cat([data.render([p] * N_REFERENCE, glyph_split="judge",
                                      generator=torch.Generator().manual_seed(order.index(data.parse_prompt(p))))
                          for p in missing])
        feats = judge_features(real).reshape(len(missing), N_REFERENCE, -1)
        _REFERENCE_CACHE.update(zip([(palette, p) for p in missing], feats))
    return torch.stack([_REFERENCE_CACHE[palette, p] for p in prompts])


def quality_distance(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Judge-feature distance ``(B,)`` float64 from each image to its nearest real canvas of the same prompt."""
    feats = judge_features(images)
    return (_reference_features(list(prompts)) - feats[:, None]).norm(dim=-1).amin(1)


@dataclass(frozen=True)
class VerdictBreakdown:
    """Why the pairwise judge decided as it did over ``n`` pairs of A against B (`breakdown`).

    Attributes:
        n: number of pairs.
        faith_wins, faith_losses: pairs decided by the attribute count (A has more, or fewer, attributes right).
        quality_wins, quality_losses: pairs with equal counts decided by the quality distance (A closer, or farther,
            to its nearest real canvas by at least ``TIE_TOLERANCE``).
        ties: the rest.
        faith_a, faith_b: mean number of attributes the attribute judge finds right (0..4).
        distance_a, distance_b: mean quality distance (`quality_distance`) over all pairs.
        decided_distance_a, decided_distance_b: the same means over the quality-decided pairs only.
    """

    n: int
    faith_wins: int
    faith_losses: int
    quality_wins: int
    quality_losses: int
    ties: int
    faith_a: float
    faith_b: float
    distance_a: float
    distance_b: float
    decided_distance_a: float
    decided_distance_b: float

    @property
    def win_rate(self) -> float:
        """``(wins + ties / 2) / n``, the same number as `win_rate`'s."""
        return (self.faith_wins + self.quality_wins + self.ties / 2) / self.n


def _parts(a_images: torch.Tensor, b_images: torch.Tensor,
           prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The judge's two terms: attribute counts of a and b ``(B,)``, and ``dq`` (> 0: a closer to real)."""
    if a_images.shape != b_images.shape or len(prompts) != len(a_images):
        raise ValueError(f"mismatched pairs: {tuple(a_images.shape)}, {tuple(b_images.shape)}, {len(prompts)} prompts")
    faith_a, faith_b = judge_attributes(a_images, prompts).count(), judge_attributes(b_images, prompts).count()
    dist_a, dist_b = quality_distance(a_images, prompts), quality_distance(b_images, prompts)
    return faith_a, faith_b, torch.stack([dist_a, dist_b])


def _verdicts(faith_a: torch.Tensor, faith_b: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    faith = faith_a - faith_b
    dq = dist[1] - dist[0]
    by_quality = torch.where(dq.abs() < TIE_TOLERANCE, 0, torch.sign(dq)).long()
    return torch.where(faith != 0, torch.sign(faith), by_quality).long()


def prefer(a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Pairwise verdicts ``(B,)`` int64: +1 if ``a`` is better, -1 if ``b`` is, 0 for a tie (see module docstring).

    Args:
        a_images, b_images: ``(B, 3, H, W)`` in ``[0, 1]``, pair i sharing ``prompts[i]``.
    """
    return _verdicts(*_parts(a_images, b_images, prompts))


def breakdown(a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> VerdictBreakdown:
    """`prefer`'s verdicts split by the term that decided them, with each term's means (`VerdictBreakdown`).

    Raises:
        ValueError: mismatched pairs, or no pairs.
    """
    if len(prompts) == 0:
        raise ValueError("no pairs to judge")
    faith_a, faith_b, dist = _parts(a_images, b_images, prompts)
    v = _verdicts(faith_a, faith_b, dist)
    by_faith = faith_a != faith_b
    by_quality = ~by_faith & (v != 0)

    def mean(x: torch.Tensor) -> float:
        return float(x.double().mean()) if x.numel() else float("nan")

    return VerdictBreakdown(
        n=len(v), faith_wins=int((by_faith & (v > 0)).sum()), faith_losses=int((by_faith & (v < 0)).sum()),
        quality_wins=int((by_quality & (v > 0)).sum()), quality_losses=int((by_quality & (v < 0)).sum()),
        ties=int((v == 0).sum()), faith_a=mean(faith_a), faith_b=mean(faith_b), distance_a=mean(dist[0]),
        distance_b=mean(dist[1]), decided_distance_a=mean(dist[0][by_quality]),
        decided_distance_b=mean(dist[1][by_quality]))


def win_rate(a_images: torch.Tensor, b_images: torch.Tensor, prompts: list[str]) -> WinRate:
    """Win rate of ``a`` over ``b`` with ties counting half."""
    from recast.winrate import aggregate_verdicts

    w = aggregate_verdicts(int(x) for x in prefer(a_images, b_images, prompts))
    return WinRate(wins=w.wins, losses=w.losses, ties=w.ties, win_rate=0.0 if w.n == 0 else w.win_rate)

"""Caption corruption and defect injection: how the base model is given room to learn on every attribute.

A flow-matching model fitted on pairs (caption c, image x) learns p(x | c). If, independently for each attribute a,
the image was drawn with a uniformly random *other* value of a with probability q_a, the model learns to follow the
caption on attribute a with probability 1 - q_a. On a held-out judge that checks a, that is an accuracy of about
1 - q_a (times the model's own rendering accuracy), a proportion that RL can raise: exactly the room the issue asks
for, with a known mechanism rather than an accident of under-training.

Quality defects work the same way: with probability q_d a training canvas is degraded by defect d (`DEFECTS`), so a
base-model sample shows defect d with probability about q_d, and the quality rewards have something to teach.

Captions are always prompts of the *train* split (the image carries the corruption, not the caption), so the held-out
test combinations are never seen as captions. All randomness comes from the generator argument; with every rate at 0
no random number is drawn at all, so the uncorrupted pretraining recipe reproduces bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from recast.worlds.digits import data

__all__ = ["Corruption", "DEFECTS", "corrupt_specs", "inject_defects", "sample_corrupted_batch"]

# defect name -> (degradation kind in recast.worlds.digits.rewards.degrade, strength range): the defects the quality rewards
# measure: blur (sharpness), speckle (clean), fade (contrast).
DEFECTS: dict[str, tuple[str, float, float]] = {
    "blur": ("blur", 0.8, 1.0),  # weaker blurs are not reproduced as blur by the base model's sampler
    "speckle": ("speckle", 0.3, 0.6),  # 4 to 7 stray pixels
    "fade": ("fade", 0.3, 0.5),  # grey background 0.09 to 0.15: above the fade judge (0.08), below the ink threshold (0.3)
}


@dataclass(frozen=True)
class Corruption:
    """Per-attribute caption-corruption probabilities q_a and per-defect injection probabilities q_d, in [0, 1]."""

    digit: float = 0.0  # P(the image shows another digit than the caption says)
    color: float = 0.0  # P(another colour)
    position: float = 0.0  # P(another quadrant)
    size: float = 0.0  # P(the other size)
    blur: float = 0.0  # P(the canvas is blurred)
    speckle: float = 0.0  # P(stray speckles are added)
    fade: float = 0.0  # P(the canvas is washed out: grey background, dim ink)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and 0.0 <= float(v) <= 1.0):
                raise ValueError(f"corruption rate {f.name}={v!r} must be a number in [0, 1]")

    @property
    def active(self) -> bool:
        """True if any rate is positive."""
        return any(getattr(self, f.name) > 0 for f in fields(self))


_VALUES = {"digit": data.DIGITS, "color": tuple(data.COLORS), "position": tuple(data.POSITIONS),
           "size": tuple(data.SIZES)}


def corrupt_specs(specs: list[data.PromptSpec], corruption: Corruption,
                  generator: torch.Generator | None = None) -> list[data.PromptSpec]:
    """Replace each attribute a of each spec by a uniformly random other value with probability q_a.

    Draws exactly two uniforms per (spec, attribute) when any attribute rate is positive, none otherwise.
    """
    attrs = [a for a in _VALUES if getattr(corruption, a) > 0]
    if not attrs:
        return list(specs)
    u = torch.rand(len(specs), len(attrs), 2, generator=generator)
    out = []
    for i, spec in enumerate(specs):
        kw = {a: getattr(spec, a) for a in _VALUES}
        for j, a in enumerate(attrs):
            if u[i, j, 0] < getattr(corruption, a):
                others = [v for v in _VALUES[a] if v != kw[a]]
                kw[a] = others[int(u[i, j, 1] * len(others)) % len(others)]
        out.append(data.PromptSpec(**kw))
    return out


def inject_defects(images: torch.Tensor, corruption: Corruption,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Degrade each canvas by each defect d independently with probability q_d (in `DEFECTS` order).

    Returns:
        (images, applied): the canvases ``(B, 3, H, W)`` in [0, 1] and, per defect, a bool mask ``(B,)``.
    """
    from recast.worlds.digits.rewards.degrade import degrade

    out, applied = images.clone(), {}
    for name, (kind, lo, hi) in DEFECTS.items():
        q = getattr(corruption, name)
        if q <= 0:
            continue
        u = torch.rand(images.shape[0], 2, generator=generator)
        hit = u[:, 0] < q
        applied[name] = hit
        idx = hit.nonzero().flatten()
        if len(idx):
            strength = lo + (hi - lo) * u[idx, 1]
            out[idx] = degrade(out[idx], kind, strength, generator)
    return out, applied


def sample_corrupted_batch(n: int, corruption: Corruption, *, glyph_split: str = "base",
                           generator: torch.Generator | None = None,
                           corruption_generator: torch.Generator | None = None,
                           tile: float = 0.0) -> tuple[torch.Tensor, list[str]]:
    """Train-split captions and canvases drawn with corrupted attributes and injected defects.

    Args:
        n: batch size.
        corruption: the rates.
        glyph_split: glyphs to render from.
        generator: draws prompts, glyphs and jitter exactly as `data.sample_batch` does.
        corruption_generator: draws the corruption and defects (a separate stream, so the rates do not shift the
            prompt and glyph draws).
        tile: `data.render`'s colour plate under the glyph (0 = none); it follows the image's (corrupted) colour
            and quadrant, like the glyph.

    Returns:
        ``(images, prompts)``: float32 ``(n, 3, CANVAS, CANVAS)`` in ``[0, 1]`` and the n (uncorrupted) captions.
    """
    prompts = data.sample_prompts(n, split="train", generator=generator)
    specs = corrupt_specs([data.parse_prompt(p) for p in prompts], corruption, corruption_generator)
    images = data.render(specs, glyph_split=glyph_split, generator=generator, tile=tile)
    images, _ = inject_defects(images, corruption, corruption_generator)
    return images, prompts

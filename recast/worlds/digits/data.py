"""The digit world's data: glyph splits, the prompt grammar, prompt sets and canvas rendering.

A canvas is an RGB image ``(3, CANVAS, CANVAS)`` in ``[0, 1]``: black background, one handwritten digit glyph from
scikit-learn's bundled ``load_digits`` (1,797 glyphs of 8x8, values 0..16), resized to the prompted size, placed in the
prompted quadrant with +-1 px jitter and coloured ``ink = colour * glyph_intensity``.

Why 24x24: the transformer's cost grows with the token count; 24x24 with patch size 2 is 144 tokens (32x32 would be
256), which keeps pretraining and RL on a 2-core CPU feasible, while each 12x12 quadrant still holds a legible glyph
(small = 8 px, the glyph's native resolution; large = 12 px, a whole quadrant).

Because every colour of every palette (``PALETTES``) has a maximum channel of exactly 1, the glyph intensity of a
canvas is recovered as its per-pixel channel maximum (``ink_intensity``); rewards and judges rely on that.

Model space is ``[-1, 1]``: ``to_model(images) = 2 images - 1`` and ``to_images(x) = clamp((x + 1) / 2, 0, 1)``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

CANVAS: int = 24  # canvas height = width in pixels
GLYPH_SPLIT_SEED: int = 0  # random_state of the stratified glyph split
JUDGE_FRACTION: float = 0.3  # share of the 1,797 glyphs held out for the judges
JITTER: int = 1  # max placement jitter in pixels, each axis

# The palettes a world can be drawn in. Every entry has a maximum channel of exactly 1 (so ``ink_intensity`` reads the
# glyph on a real canvas in either). "primary" is the default world's. In it yellow is the one colour drawn in two
# channels, so its ink carries twice the energy of the others against the same noise, and the base model places
# yellow glyphs earliest (research/rounds/03-tile-from-scratch.md "The tile-from-scratch round"). "equal_energy" is the
# palette probe's: four hues that are each one channel at 1 and a second at 0.5, so every colour has squared norm 1.25.
PALETTES: dict[str, dict[str, tuple[float, float, float]]] = {
    "primary": {
        "red": (1.0, 0.0, 0.0),
        "yellow": (1.0, 1.0, 0.0),
        "green": (0.0, 1.0, 0.0),
        "blue": (0.0, 0.0, 1.0),
    },
    "equal_energy": {
        "red": (1.0, 0.0, 0.5),
        "yellow": (1.0, 0.5, 0.0),
        "green": (0.0, 1.0, 0.5),
        "blue": (0.0, 0.5, 1.0),
    },
}
# The process's palette. `set_palette` (which `recast.worlds.digits.model.load_world` calls with the world's own
# palette) rewrites its values in place, so every reader of ``COLORS`` sees the palette of the world last loaded.
COLORS: dict[str, tuple[float, float, float]] = dict(PALETTES["primary"])
# Region boxes (y0, x0, y1, x1), half-open pixel bounds: the four 12x12 quadrants.
_H = CANVAS // 2
POSITIONS: dict[str, tuple[int, int, int, int]] = {
    "top left": (0, 0, _H, _H),
    "top right": (0, _H, _H, CANVAS),
    "bottom left": (_H, 0, CANVAS, _H),
    "bottom right": (_H, _H, CANVAS, CANVAS),
}
SIZES: dict[str, int] = {"small": 8, "large": 12}  # glyph side length in pixels
DIGITS: tuple[int, ...] = tuple(range(10))
VOCAB: tuple[str, ...] = (
    ("a", "at", "the")
    + tuple(SIZES)
    + tuple(COLORS)
    + tuple(str(d) for d in DIGITS)
    + ("top", "bottom", "left", "right")
)

_PROMPT_RE = re.compile(r"^a (\w+) (\w+) (\d) at the (\w+ \w+)$")


def set_palette(name: str) -> None:
    """Draw and read colours in the palette ``name`` (a key of ``PALETTES``) from now on, process-wide.

    ``COLORS`` keeps its keys (the vocabulary) and takes the palette's RGB values in place.

    Raises:
        ValueError: for a name that is not a key of ``PALETTES``.
    """
    if name not in PALETTES:
        raise ValueError(f"unknown palette {name!r}; valid: {', '.join(PALETTES)}")
    COLORS.update(PALETTES[name])


def palette_name() -> str:
    """The key of ``PALETTES`` whose values ``COLORS`` holds now."""
    for name, values in PALETTES.items():
        if values == COLORS:
            return name
    raise RuntimeError(f"COLORS matches no palette: {COLORS}")


@contextlib.contextmanager
def palette(name: str):
    """Use the palette ``name`` inside a ``with`` block and restore the previous one after it, even on error."""
    before = palette_name()
    set_palette(name)
    try:
        yield
    finally:
        set_palette(before)


def palette_scale() -> float:
    """The smallest distance between two colours of the current palette: 1 in "primary", 1/sqrt(2) in
    "equal_energy". The colour reward's kernel width is given in these units, so a wrong palette colour scores the
    same in either palette."""
    values = torch.tensor(list(COLORS.values()), dtype=torch.float64)
    d = ((values[:, None] - values[None]) ** 2).sum(-1).sqrt()
    return float(d[~torch.eye(len(values), dtype=torch.bool)].min())


def region_center(position: str) -> tuple[float, float]:
    """Centre ``(y, x)`` of a region in pixel coordinates (pixel i has centre i)."""
    y0, x0, y1, x1 = POSITIONS[position]
    return ((y0 + y1 - 1) / 2.0, (x0 + x1 - 1) / 2.0)


@dataclass(frozen=True)
class PromptSpec:
    """One prompt of the grammar ``"a {size} {color} {digit} at the {position}"``.

    Attributes:
        digit: 0..9.
        color: a key of ``COLORS``.
        position: a key of ``POSITIONS``.
        size: a key of ``SIZES``.
    """

    digit: int
    color: str
    position: str
    size: str

    def __post_init__(self) -> None:
        if self.digit not in DIGITS or self.color not in COLORS or self.position not in POSITIONS \
                or self.size not in SIZES:
            raise ValueError(f"invalid prompt attributes: {self!r}")

    @property
    def text(self) -> str:
        """The natural-language prompt, e.g. ``"a large red 7 at the top left"``."""
        return f"a {self.size} {self.color} {self.digit} at the {self.position}"


def parse_prompt(text: str) -> PromptSpec:
    """Parse a prompt of the grammar back into a ``PromptSpec``.

    Raises:
        ValueError: naming the text, if it is not a prompt of the grammar.
    """
    m = _PROMPT_RE.match(text.strip()) if isinstance(text, str) else None
    if m is None or m.group(1) not in SIZES or m.group(2) not in COLORS or m.group(4) not in POSITIONS:
        raise ValueError(f"not a digit-world prompt: {text!r} (expected e.g. 'a large red 7 at the top left')")
    return PromptSpec(digit=int(m.group(3)), color=m.group(2), position=m.group(4), size=m.group(1))


def all_specs() -> list[PromptSpec]:
    """Every attribute combination (10 x 4 x 4 x 2 = 320), in a fixed order."""
    return [PromptSpec(d, c, p, s) for d, c, p, s in itertools.product(DIGITS, COLORS, POSITIONS, SIZES)]


def _is_test(spec: PromptSpec) -> bool:
    """Held-out rule: a fixed 1-in-5 residue class, so every attribute value keeps most combos in train."""
    c, p, s = list(COLORS).index(spec.color), list(POSITIONS).index(spec.position), list(SIZES).index(spec.size)
    return (spec.digit + c + p + 2 * s) % 5 == 0


def prompt_set(split: str) -> list[str]:
    """Deterministic prompt texts of a split.

    Args:
        split: ``"train"`` (256 combinations) or ``"test"`` (the held-out 64 = 20%; every attribute value still
            appears in train, but never in this combination).

    Returns:
        The prompt texts, in a fixed order.
    """
    if split not in ("train", "test"):
        raise ValueError(f"unknown prompt split {split!r}; expected 'train' or 'test'")
    return [s.text for s in all_specs() if _is_test(s) == (split == "test")]


@functools.lru_cache(maxsize=1)
def _glyph_split_indices() -> dict[str, np.ndarray]:
    """Stratified deterministic split of the 1,797 glyph indices into base / judge."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    labels = load_digits().target
    base, judge = train_test_split(np.arange(len(labels)), test_size=JUDGE_FRACTION, stratify=labels,
                                   random_state=GLYPH_SPLIT_SEED)
    return {"base": np.sort(base), "judge": np.sort(judge)}


@functools.lru_cache(maxsize=4)
def _load(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    if split not in ("base", "judge", "all"):
        raise ValueError(f"unknown glyph split {split!r}; expected 'base', 'judge' or 'all'")
    d = load_digits()
    idx = np.arange(len(d.target)) if split == "all" else _glyph_split_indices()[split]
    glyphs = torch.from_numpy(d.images[idx].astype(np.float32) / 16.0)
    return glyphs, torch.from_numpy(d.target[idx].astype(np.int64))


def load_glyphs(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Glyphs of a split.

    Args:
        split: ``"base"`` (70%: base-model pretraining and reward models), ``"judge"`` (30%: judges only) or
            ``"all"``.

    Returns:
        ``(glyphs, labels)``: float32 ``(N, 8, 8)`` in ``[0, 1]`` and int64 ``(N,)``. Fresh copies.
    """
    glyphs, labels = _load(split)
    return glyphs.clone(), labels.clone()


@functools.lru_cache(maxsize=8)
def _glyph_bank(split: str, size: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Glyphs of a split resized to ``SIZES[size]`` (N, s, s), and the glyph indices of each digit."""
    glyphs, labels = _load(split)
    s = SIZES[size]
    resized = F.interpolate(glyphs[:, None], size=(s, s), mode="bilinear", align_corners=False,
                            antialias=s < 8)[:, 0].clamp(0, 1)
    return resized, [torch.nonzero(labels == d).flatten() for d in DIGITS]


def render(specs: list[PromptSpec] | list[str], *, glyph_split: str = "base",
           generator: torch.Generator | None = None, tile: float = 0.0) -> torch.Tensor:
    """Render one canvas per prompt.

    Args:
        specs: ``PromptSpec``s or prompt texts, length B.
        glyph_split: which glyphs to draw from (``"base"`` or ``"judge"``).
        generator: CPU ``torch.Generator`` for glyph choice and jitter; same state => identical output.
        tile: intensity in ``[0, 1)`` of a plate of the prompted colour filling the prompted quadrant under the
            glyph (``ink = colour * max(tile, glyph)`` there). 0, the default world, draws no plate and the same
            random numbers, so the output is unchanged bit for bit. The plate gives colour and position a
            low-frequency carrier of 144 pixels, which a noisy canvas reveals at a higher noise level than the
            glyph's strokes (the tile probe, `research/probes/tile_timing_probe.py`).

    Returns:
        images: float32 ``(B, 3, CANVAS, CANVAS)`` in ``[0, 1]``.
    """
    if not (isinstance(tile, (int, float)) and 0.0 <= float(tile) < 1.0):
        raise ValueError(f"tile must be a number in [0, 1), got {tile!r}")
    specs = [parse_prompt(s) if isinstance(s, str) else s for s in specs]
    B = len(specs)
    u = torch.rand(B, 3, generator=generator)  # glyph choice, y jitter, x jitter
    images = torch.zeros(B, 3, CANVAS, CANVAS)
    for i, spec in enumerate(specs):
        bank, by_digit = _glyph_bank(glyph_split, spec.size)
        pool = by_digit[spec.digit]
        glyph = bank[pool[int(u[i, 0] * len(pool)) % len(pool)]]
        s = glyph.shape[-1]
        y0, x0, y1, x1 = POSITIONS[spec.position]
        jy, jx = (int(v * (2 * JITTER + 1)) - JITTER for v in u[i, 1:].tolist())
        top = min(max(y0 + (y1 - y0 - s) // 2 + jy, 0), CANVAS - s)
        left = min(max(x0 + (x1 - x0 - s) // 2 + jx, 0), CANVAS - s)
        color = torch.tensor(COLORS[spec.color])[:, None, None]
        if tile > 0:
            plate = torch.zeros(CANVAS, CANVAS)
            plate[y0:y1, x0:x1] = float(tile)
            plate[top:top + s, left:left + s] = torch.maximum(plate[top:top + s, left:left + s], glyph)
            images[i] = color * plate
        else:
            images[i, :, top:top + s, left:left + s] = color * glyph
    return images


def sample_prompts(n: int, *, split: str = "train", generator: torch.Generator | None = None) -> list[str]:
    """``n`` prompt texts drawn uniformly with replacement from a prompt split."""
    pool = prompt_set(split)
    idx = torch.randint(len(pool), (n,), generator=generator)
    return [pool[i] for i in idx.tolist()]


def sample_batch(n: int, *, split: str = "train", glyph_split: str = "base",
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, list[str]]:
    """Random prompts of a prompt split and their rendered canvases.

    Returns:
        ``(images, prompts)``: float32 ``(n, 3, CANVAS, CANVAS)`` in ``[0, 1]`` and n prompt texts.
    """
    prompts = sample_prompts(n, split=split, generator=generator)
    return render(prompts, glyph_split=glyph_split, generator=generator), prompts


def ink_intensity(images: torch.Tensor) -> torch.Tensor:
    """Glyph intensity ``(B, H, W)`` of canvases ``(B, 3, H, W)``: the per-pixel channel maximum."""
    return images.amax(dim=1)


def to_model(images: torch.Tensor) -> torch.Tensor:
    """Map images in ``[0, 1]`` to model space ``[-1, 1]``."""
    return 2.0 * images - 1.0


def to_images(x: torch.Tensor) -> torch.Tensor:
    """Map model-space samples to images in ``[0, 1]`` (clamped)."""
    return ((x + 1.0) / 2.0).clamp(0.0, 1.0)

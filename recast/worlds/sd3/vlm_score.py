"""Pointwise VLM judge: a vision-language model scores each image of a prompt alone, on named axes (UnifiedReward-2).

UnifiedReward-2.0's pointwise image-generation mode rates an image against its caption on three axes, each 1 to 5,
one line each: ``Alignment Score (1-5): X``, ``Coherence Score (1-5): Y``, ``Style Score (1-5): Z``. `SCORE_PROMPT`
asks for exactly that reply in our own words; the authors' exact wording can be passed as ``prompt_template`` (any
text with "{prompt}"). The judge's score is the mean of the axes it reads (`PointwiseVLMJudge.axes`), in [1, 5].

`parse_scores` reads a reply in one bounded, linear pass; a reply it cannot read, a request that failed after its
retries, or a malformed reply is an abstention: NaN in the score tensor, counted in `PointwiseVLMJudge.abstained`,
never guessed. A fatal refusal (`VLMRequestError.fatal`: bad key, wrong path or model) stops the run. Backends are
those of the pairwise judge (`recast.worlds.sd3.vlm_judge`): `(text, [png_bytes]) -> answer`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from recast.worlds.sd3.vlm_client import VLMRequestError

__all__ = ["AXES", "MAX_CHARS", "SCORE_PROMPT", "ScoreReply", "parse_scores", "PointwiseVLMJudge"]

log = logging.getLogger(__name__)

AXES = ("alignment", "coherence", "style")
MAX_CHARS = 4096  # a reply is read up to here: the three lines fit many times over
SCORE_PROMPT = """You will see one image that was generated from the caption below. Rate it on three axes, each with
a number from 1 (worst) to 5 (best):
- Alignment: does the image show what the caption describes (objects, counts, colours, positions, quoted text)?
- Coherence: is the image free of glitches, distorted objects and broken anatomy or geometry?
- Style: how aesthetically pleasing is the image, whatever the caption says?

Reply with exactly these three lines and nothing else:
Alignment Score (1-5): <number>
Coherence Score (1-5): <number>
Style Score (1-5): <number>

Caption: {prompt}"""

_MARKS = " \t*_`#>-"  # markdown around labels and numbers


def _number(text: str) -> float | None:
    """The decimal number at the start of `text` ("4", "3.5", ".5"), or None; at most 16 characters are read."""
    end = 0
    while end < min(len(text), 16) and (text[end].isdigit() or text[end] == "."):
        end += 1
    try:
        return float(text[:end]) if any(c.isdigit() for c in text[:end]) else None
    except ValueError:  # "3.5.1"
        return None


def _line_score(line: str, label: str) -> float | None:
    """The number of a line "<label> score (range): <number>" (markdown allowed around each part), else None."""
    rest = line.lstrip(_MARKS)
    if not rest.startswith(label):
        return None
    rest = rest[len(label):].lstrip(_MARKS)
    if rest.startswith("score"):
        rest = rest[len("score"):].lstrip(_MARKS)
    if rest.startswith("("):  # "(1-5)": a short parenthesised range
        close = rest.find(")", 0, 12)
        if close < 0:
            return None
        rest = rest[close + 1:].lstrip(_MARKS)
    if not rest.startswith((":", "=")):
        return None
    return _number(rest[1:].lstrip(_MARKS))


def parse_scores(text, axes: tuple[str, ...] = AXES, low: float = 1.0, high: float = 5.0) -> dict[str, float] | None:
    """Each axis's score from a judge's reply, or None (an abstention).

    The reply is read line by line, case-insensitively, up to `MAX_CHARS`. For each axis the first line of the form
    "<axis> score (1-5): <number>" counts (markdown marks may surround the parts; "score" and the parenthesised range
    are optional; ":" or "="): later lines never override it, so text read off an image cannot change a score given
    before it. Lines that start with an axis name but are not of that form (reasoning) are skipped. None unless every
    axis has such a line and every number lies in [low, high]. Each step is a prefix test, a bounded scan or a str
    strip, so the time is linear in the reply's length, and the length read is bounded.
    """
    if not isinstance(text, str):
        return None
    found: dict[str, float] = {}
    for line in text[:MAX_CHARS].lower().splitlines():
        for axis in axes:
            if axis not in found:
                value = _line_score(line, axis)
                if value is not None:
                    found[axis] = value
    if len(found) < len(axes) or any(not low <= v <= high for v in found.values()):
        return None
    return found


@dataclass(frozen=True)
class ScoreReply:
    """One scored image: its axis scores (None: abstained), the raw answer, and why a request failed (else None)."""

    scores: dict[str, float] | None
    answer: str
    error: str | None = None

    @property
    def score(self) -> float:
        """Mean of the axis scores; NaN when abstained."""
        return sum(self.scores.values()) / len(self.scores) if self.scores else math.nan


class PointwiseVLMJudge:
    """Score each (image, prompt) with a VLM backend: the mean of `axes`, NaN where it abstains.

    Args:
        backend: `(text, [png]) -> answer`; a non-fatal `VLMRequestError` makes the image an abstention, a fatal one
            stops the run; any other exception propagates.
        prompt_template: the judge prompt; "{prompt}" is replaced by the generation prompt.
        axes, low, high: the axes averaged and their valid range (`parse_scores`).
    """

    def __init__(self, backend, prompt_template: str = SCORE_PROMPT, axes: tuple[str, ...] = AXES,
                 low: float = 1.0, high: float = 5.0):
        if "{prompt}" not in prompt_template:
            raise ValueError("prompt_template must contain '{prompt}'")
        if not axes or not all(isinstance(a, str) and a.strip() == a and a for a in axes):
            raise ValueError(f"axes must be non-empty names, got {axes!r}")
        if not low < high:
            raise ValueError(f"need low < high, got {low}, {high}")
        self.backend, self.template = backend, prompt_template
        self.axes, self.low, self.high = tuple(a.lower() for a in axes), low, high
        self.abstained = 0  # images without a usable score so far

    def replies(self, images: torch.Tensor, prompts: list[str]) -> list[ScoreReply]:
        """One `ScoreReply` per image (B, 3, H, W) in [0, 1]."""
        from recast.worlds.sd3.vlm_judge import to_png

        if images.ndim != 4 or len(prompts) != len(images):
            raise ValueError(f"need images (B, 3, H, W) and B prompts, got {tuple(images.shape)}, {len(prompts)}")
        out = []
        for i, (image, prompt) in enumerate(zip(images, prompts)):
            try:
                answer = self.backend(self.template.replace("{prompt}", prompt), [to_png(image)])
            except VLMRequestError as e:
                if e.fatal:
                    log.error("VLM scorer stopped at image %d of %d: %s", i + 1, len(prompts), e)
                    raise
                log.warning("VLM scorer: image %d of %d abstains: %s", i + 1, len(prompts), e)
                out.append(ScoreReply(None, "", error=str(e)))
                continue
            out.append(ScoreReply(parse_scores(answer, self.axes, self.low, self.high), answer))
        missing = sum(r.scores is None for r in out)
        self.abstained += missing
        if missing:
            log.warning("VLM scorer: %d of %d images without a usable score (NaN)", missing, len(out))
        return out

    def __call__(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """Scores (B,) float32, NaN where the judge abstained."""
        return torch.tensor([r.score for r in self.replies(images, prompts)], dtype=torch.float32)

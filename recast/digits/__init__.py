"""The digit world: an embedded text-to-image world on scikit-learn's handwritten digits."""

from recast.digits.data import (
    CANVAS,
    COLORS,
    POSITIONS,
    SIZES,
    VOCAB,
    PromptSpec,
    load_glyphs,
    parse_prompt,
    prompt_set,
    render,
    sample_batch,
    to_images,
    to_model,
)

__all__ = ["CANVAS", "COLORS", "POSITIONS", "SIZES", "VOCAB", "PromptSpec", "load_glyphs", "parse_prompt",
           "prompt_set", "render", "sample_batch", "to_images", "to_model"]

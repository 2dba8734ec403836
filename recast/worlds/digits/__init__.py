"""The digit world: an embedded text-to-image world on scikit-learn's handwritten digits.

`load`, `tiny` and `info` are its entries in the `recast.world` registry (the `World` protocol, `world.py`); the
model itself (a small flow transformer and text encoder) is `model.py`, the prompts and renderer `data.py`, the
rewards `rewards/` and the held-out judges `judges/`.
"""

from recast.worlds.digits.data import (
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

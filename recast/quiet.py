"""Known, harmless messages of the libraries the package drives, dropped at the loggers that emit them.

Each entry is one logger and the start of one message, with the reason it says nothing a user can act on; any other
message of the same logger still reaches the user. `install` runs when `recast` is imported (it only adds
`logging.Filter`s, importing none of those libraries).
"""

from __future__ import annotations

import logging

__all__ = ["QUIET", "install"]

QUIET: tuple[tuple[str, str, str], ...] = (
    # diffusers' SD3 pipeline module imports transformers' image processors, which fall back to their PIL versions
    # without torchvision; the package uses those PIL processors and does not depend on torchvision
    ("transformers.utils.import_utils", "`CLIPImageProcessor` requires torchvision (not installed)",
     "torchvision is not a dependency; the PIL processor is the one used"),
    ("transformers.utils.import_utils", "`SiglipImageProcessor` requires torchvision (not installed)",
     "torchvision is not a dependency; IP-adapters are not used"),
    # the SD3 world encodes every prompt through `pipe.encode_prompt`, which truncates to the CLIP encoders' length
    # and to max_sequence_length for T5 by design, and says so for every prompt of every batch (44 KB per tiny run,
    # whose encoders take 16 tokens)
    ("diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3",
     "The following part of your input was truncated because", "SD3 truncates prompts by design"),
    ("transformers.tokenization_utils_base", "Token indices sequence length is longer than the specified maximum",
     "diffusers tokenizes untruncated only to compare, then truncates"),
)


class _Drop(logging.Filter):
    """Drop records whose message starts with one of ``prefixes``."""

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format is not one of ours
            return True
        return not message.startswith(self.prefixes)


def install() -> None:
    """Add the filters of `QUIET` to their loggers, once per logger."""
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, prefix, _why in QUIET:
        by_logger[name] = (*by_logger.get(name, ()), prefix)
    for name, prefixes in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(prefixes))

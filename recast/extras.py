"""What to install for what: the package's name on the package index, and the extra that brings each optional module.

Every message that tells a user to install something is built here, so they all name the same distribution. The
name `recast` on the public index is an unrelated package; this one is published as `recast-credit` and imported as
`recast`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

__all__ = ["DISTRIBUTION", "EXTRAS", "pip_hint", "missing"]

DISTRIBUTION = "recast-credit"  # pyproject.toml's [project] name (tests/test_names.py)

# top-level module -> the extra of pyproject.toml that installs it (tests/test_names.py checks each pair)
EXTRAS = {"diffusers": "train", "transformers": "train", "accelerate": "train", "peft": "train",
          "safetensors": "train", "tqdm": "train", "yaml": "train", "sklearn": "digits", "scipy": "digits",
          "matplotlib": "plot", "seaborn": "plot", "sentencepiece": "sd3", "papermill": "notebooks",
          "tensorboard": "tensorboard", "wandb": "wandb", "rapidocr_onnxruntime": "ocr", "rapidfuzz": "ocr"}


def pip_hint(extra: str | None = None) -> str:
    """The command that installs the package with ``extra`` (the core alone when None)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"


def missing(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (found without importing them)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package that fails, or a module with no spec
            found = False
        if not found:
            out.append(name)
    return out

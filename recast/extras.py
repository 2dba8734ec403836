"""What to install for what: the package's name on the package index, and the extra that brings each optional module.

Every message that tells a user to install something is built here, so they all name the same distribution. The
name `recast` on the public index is an unrelated package; this one is distributed as `recast-credit` (not on the
public index yet: install it from a clone or a built wheel) and imported as `recast`.
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
    """The command that installs the package with ``extra`` (the core alone when None): from a clone, or from a
    built wheel; `DISTRIBUTION` is not on the public package index yet, so installing it by name finds
    nothing."""
    spec = f"[{extra}]" if extra else ""
    return f"pip install -e '.{spec}' in a clone (or pip install 'recast_credit-<version>-py3-none-any.whl{spec}')"


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

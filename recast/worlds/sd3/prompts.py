"""Prompt datasets: plain-text prompt files and GenEval-style metadata (jsonl).

Plain text: one prompt per line; blank lines and lines starting with "#" are skipped; surrounding whitespace is
stripped. GenEval metadata: one JSON object per line, as in GenEval's `evaluation_metadata.jsonl`:

    {"tag": "color_attr", "prompt": "a photo of a red bench and a blue cat",
     "include": [{"class": "bench", "count": 1, "color": "red"}, {"class": "cat", "count": 1, "color": "blue",
                  "position": ["right of", 0]}],
     "exclude": [{"class": "dog", "count": 1}]}

`position: [relation, i]` says where this object stands relative to `include[i]`; an `exclude` entry with count c
means "fewer than c of that class". `load_prompts` reads either format (by suffix) and returns the prompt texts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ObjectSpec", "GenEvalItem", "RELATIONS", "load_prompt_file", "load_geneval_metadata", "load_prompts"]

RELATIONS = ("left of", "right of", "above", "below")


@dataclass(frozen=True)
class ObjectSpec:
    """One object clause of a GenEval prompt.

    Attributes:
        cls: detector class name, e.g. "bench".
        count: required count (for `include`: exactly this many; for `exclude`: fewer than this many).
        color: required colour name or None.
        position: (relation, index into include) or None; relation in `RELATIONS`.
    """

    cls: str
    count: int = 1
    color: str | None = None
    position: tuple[str, int] | None = None


@dataclass(frozen=True)
class GenEvalItem:
    """A GenEval prompt and what a correct image must contain."""

    prompt: str
    tag: str
    include: tuple[ObjectSpec, ...]
    exclude: tuple[ObjectSpec, ...] = ()


def _read_text(path: Path) -> str:
    """A prompt file's text: UTF-8, a byte-order mark dropped; anything else refused naming the file and byte."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"prompt file {path} is not UTF-8 text ({err.reason} at byte {err.start}); save it as "
                         "UTF-8") from None


def load_prompt_file(path: str | Path) -> list[str]:
    """Prompts of a plain-text file (see module docstring). Raises FileNotFoundError / ValueError (empty file)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {path} not found")
    prompts = [s.strip() for s in _read_text(path).splitlines()]
    prompts = [s for s in prompts if s and not s.startswith("#")]
    if not prompts:
        raise ValueError(f"prompt file {path} holds no prompts")
    return prompts


def _object(d: dict, where: str, n_include: int | None) -> ObjectSpec:
    if not isinstance(d, dict) or not isinstance(d.get("class"), str) or not d["class"]:
        raise ValueError(f"{where}: each object needs a non-empty 'class'")
    count = d.get("count", 1)
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"{where}: 'count' must be an integer >= 0, got {count!r}")
    position = d.get("position")
    if position is not None:
        if (not isinstance(position, (list, tuple)) or len(position) != 2 or position[0] not in RELATIONS
                or not isinstance(position[1], int) or not (n_include is None or 0 <= position[1] < n_include)):
            raise ValueError(f"{where}: 'position' must be [relation in {RELATIONS}, index of an included object], "
                             f"got {position!r}")
        position = (position[0], position[1])
    return ObjectSpec(d["class"], count, d.get("color"), position)


def load_geneval_metadata(path: str | Path) -> list[GenEvalItem]:
    """GenEval-style metadata, one `GenEvalItem` per non-empty line.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not valid JSON or lacks 'prompt' / 'include', naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GenEval metadata {path} not found")
    items = []
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise ValueError(f"{where}: each line must be a JSON object with 'prompt' and 'include', got a "
                             f"{type(d).__name__}")
        if not isinstance(d.get("prompt"), str) or not isinstance(d.get("include"), list) or not d["include"]:
            raise ValueError(f"{where}: needs a 'prompt' string and a non-empty 'include' list")
        include = tuple(_object(o, where, len(d["include"])) for o in d["include"])
        exclude = tuple(_object(o, where, None) for o in d.get("exclude", []))
        items.append(GenEvalItem(d["prompt"], str(d.get("tag", "")), include, exclude))
    if not items:
        raise ValueError(f"GenEval metadata {path} holds no items")
    return items


def load_prompts(path: str | Path) -> list[str]:
    """Prompt texts of a `.txt` prompt file or a `.jsonl` GenEval metadata file."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return [item.prompt for item in load_geneval_metadata(path)]
    return load_prompt_file(path)

"""Bounded input: user text that becomes a structure (YAML configs, ``--set`` values, notebook parameters) and every
message that echoes a user's value.

A YAML file of a few hundred bytes can describe a billion values through aliases (``&a [x, x]``, ``*a``): PyYAML
builds each anchored node once and shares it, so the load is fast, but anything that walks the result (a repr in an
error message, `dataclasses.asdict`, a deep copy) expands every alias. `load_yaml` therefore counts the values a
document holds with every alias expanded, refuses more than `MAX_NODES`, and refuses recursive aliases and
duplicate keys; `short_repr` bounds what an error message shows of any value.
"""

from __future__ import annotations

import functools
import reprlib

__all__ = ["MAX_CONFIG_BYTES", "MAX_NODES", "MAX_TEXT", "short_repr", "count_nodes", "load_yaml"]

MAX_CONFIG_BYTES = 256 * 1024  # a config file larger than this is not a config (the shipped ones are under 3 KB)
MAX_TEXT = 64 * 1024  # one --set value or notebook parameter
MAX_NODES = 100_000  # values in one document with every alias expanded (a 50 x 1,000 fixed W is 50,051)

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 6, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 80, 80, 40


def short_repr(value, limit: int = 200) -> str:
    """A repr of `value` for a one-line message: nested and long values elided ("[1, 2, ...]"), at most `limit`
    characters, in time independent of the value's size."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def count_nodes(value, limit: int = MAX_NODES) -> int:
    """The number of values in `value` with shared sub-structures counted at every place they occur (what walking it
    costs), stopping once it passes `limit`.

    Raises:
        ValueError: the value contains itself (a recursive alias).
    """
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()

    def size(v) -> int:
        if not isinstance(v, (list, tuple, dict)):
            return 1
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in open_ids:
            raise ValueError("a value contains itself (a recursive YAML alias)")
        open_ids.add(key)
        total = 1
        for child in (v.items() if isinstance(v, dict) else v):
            total += size(child[0]) + size(child[1]) if isinstance(v, dict) else size(child)
            if total > limit:
                break
        open_ids.discard(key)
        sizes[key] = total
        return total

    return size(value)


class _DuplicateKey(ValueError):
    """A mapping names one key twice (YAML says keys are unique; PyYAML would keep the last silently)."""


@functools.cache
def _loader():
    """A `yaml.SafeLoader` that refuses a key given twice in one mapping (naming it and its line)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # "<<: *base" merges are overridden on purpose
                    key = self.construct_object(key_node, deep=False)
                    try:
                        first = seen.get(key)
                        seen[key] = key_node.start_mark.line + 1
                    except TypeError:
                        continue  # an unhashable key: the base constructor refuses it
                    if first is not None:
                        raise _DuplicateKey(f"duplicate key {short_repr(key)} (first on line {first}, again on line "
                                            f"{key_node.start_mark.line + 1}): give each key once")
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def load_yaml(text: str, where: str, *, max_nodes: int = MAX_NODES, max_chars: int | None = MAX_TEXT):
    """Parse `text` as YAML, safely (no tags that build objects) and within bounds.

    Args:
        text: the YAML text.
        where: what the text is, for messages ("--config a.yaml", "--set world_settings").
        max_nodes: the most values the document may hold with every alias expanded.
        max_chars: the longest text accepted (None: the caller bounded it).

    Raises:
        ValueError: naming `where`: not YAML, a duplicate key, a recursive alias, or too large.
    """
    import yaml

    if max_chars is not None and len(text) > max_chars:
        raise ValueError(f"{where}: {len(text):,} characters, more than the {max_chars:,} accepted")
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as err:
        raise ValueError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: not valid YAML ({' '.join(str(err).split())[:300]})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply") from None
    try:
        n = count_nodes(data, max_nodes)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply") from None
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    if n > max_nodes:
        raise ValueError(f"{where}: holds more than {max_nodes:,} values with its aliases expanded (a YAML alias "
                         "bomb?); a config holds settings, not data")
    return data

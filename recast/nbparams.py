"""A notebook's parameters, parsed by the types its ``parameters`` cell declares, and its outputs checked, before any
compute.

papermill's ``-p NAME VALUE`` passes a number for a number and True/False for "True"/"False", but any other text as a
string, which Python then takes at face value: ``-p overwrite false`` is the string "false", which is true, and
``-p T abc`` fails deep inside the notebook. Every notebook's first cell after its parameters therefore calls

    typed_parameters(globals(), outputs=["out_dir"])

which reads the annotations of the parameters cell (``T: int = 10``), parses each value by its declared type, puts
the parsed value back, and checks the output folders and the figures folder (`recast.plotting.check_figures_dir`)
can be written. Anything that does not parse is refused in one line naming the parameter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from recast.bounded import load_yaml, short_repr
from recast.config import parse_bool

__all__ = ["parse_parameter", "typed_parameters", "check_output_dir"]


def _fail(name: str, what: str, value) -> ValueError:
    return ValueError(f"notebook parameter {name}: expected {what}, got {short_repr(value)}")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_parameter(name: str, typ, value):
    """`value` as the declared type `typ` (bool, int, float, str, list or dict); other types are returned as they are.

    - bool: True/False, or true/false/yes/no/1/0 in any case (`recast.config.parse_bool`), or the numbers 1/0;
    - int: an integer, or text that is one ("30"); a bool is refused;
    - float: a number, or text that is one ("3e-4");
    - str: text, or a number written as text (``-p lam 0.5``);
    - list: a list, YAML text of one ("[0.4, 0.6]"), comma-separated items ("0,1,2", each a YAML scalar), or one
      scalar (a list of it); "" is [];
    - dict: a mapping, or YAML text of one ("{kl_beta: 2}"); "" is {}.

    Raises:
        ValueError: naming the parameter, the type and the value.
    """
    if typ is bool:
        if isinstance(value, bool):
            return value
        if _is_number(value) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            try:
                return parse_bool(value, f"notebook parameter {name}")
            except ValueError:
                pass
        raise _fail(name, "a boolean (true/false/yes/no/1/0)", value)
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise _fail(name, "an integer", value)
    if typ is float:
        if _is_number(value):
            return float(value)
        if isinstance(value, str):
            try:
                out = float(value.strip())
                if not math.isnan(out):
                    return out
            except ValueError:
                pass
        raise _fail(name, "a number", value)
    if typ is str:
        if isinstance(value, str):
            return value
        if _is_number(value):
            return str(value)
        raise _fail(name, "text", value)
    if typ is list:
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):
            if not value.strip():
                return []
            parsed = load_yaml(value, f"notebook parameter {name}")
            if isinstance(parsed, list):
                return parsed
            if isinstance(parsed, str) and "," in parsed:
                return [load_yaml(item, f"notebook parameter {name}") for item in parsed.split(",") if item.strip()]
            value = parsed
        if value is None or isinstance(value, (str, int, float, bool)):
            return [] if value is None else [value]
        raise _fail(name, "a list", value)
    if typ is dict:
        if isinstance(value, dict):
            return value
        if isinstance(value, str):
            parsed = load_yaml(value, f"notebook parameter {name}") if value.strip() else {}
            if isinstance(parsed, dict):
                return parsed
        raise _fail(name, "a mapping such as {kl_beta: 2}", value)
    return value


def check_output_dir(path, name: str = "out_dir") -> Path:
    """Create the output folder `path` if missing and check this process can write there.

    Raises:
        PermissionError / FileExistsError: naming the parameter and the folder.
    """
    from recast.io import writable_folder

    if not str(path).strip():
        raise ValueError(f"notebook parameter {name}: empty; give a folder")
    return writable_folder(str(path), f"notebook parameter {name}: {path}")


def typed_parameters(namespace: dict, outputs: Sequence[str] = (), *, figures: bool = True) -> dict:
    """Parse a notebook's parameters in place by their declared types (`parse_parameter`), then check its outputs.

    Args:
        namespace: the notebook's ``globals()``; its ``__annotations__`` (what the parameters cell declares) give
            the types.
        outputs: names of parameters that are output folders (created and checked writable now).
        figures: check the figures folder (`recast.plotting.check_figures_dir`: $RECAST_FIGURES_DIR or
            runs/figures) too.

    Returns:
        {name: parsed value} of every annotated parameter.

    Raises:
        ValueError / OSError: naming the parameter (or $RECAST_FIGURES_DIR) at fault.
    """
    annotations = namespace.get("__annotations__", {})
    parsed = {}
    for name, typ in annotations.items():
        if name in namespace:
            parsed[name] = namespace[name] = parse_parameter(name, typ, namespace[name])
    for name in outputs:
        if name not in namespace:
            raise ValueError(f"typed_parameters: no parameter {name!r} to check as an output folder")
        check_output_dir(namespace[name], name)
    if figures:
        from recast.plotting import check_figures_dir

        check_figures_dir()
    return parsed

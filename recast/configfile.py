"""Config files and the order in which a run's settings are layered (docs/training.md, "Configs").

A run's `TrainConfig` is built in this order, each layer overriding the one before:

1. the preset (`recast.config.preset`, "cpu" unless named);
2. YAML files (``--config FILE[,FILE...]`` / the notebooks' ``config``), each over the one before: any TrainConfig
   field, ``world_settings`` (the
   world's own settings, e.g. SD3's resolution, prompt files and held-out judges), and ``preset`` itself;
3. the named options (``--setting``, ``--method``, ... / the notebooks' named parameters);
4. ``--set FIELD=VALUE`` (``--set world_settings.resolution=256`` sets one world setting) / the notebooks'
   ``overrides``.

Every value is parsed by its field's declared type; an unknown key, a wrong type or a missing file is refused with one
line naming it, before anything is built. A notebook parameter left empty ("", 0 where 0 is no valid value, [],
{}) means "not given", so a config file's value stands.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from recast.bounded import MAX_CONFIG_BYTES, load_yaml, short_repr
from recast.config import REPO_ROOT, TrainConfig, field_types, parse_field, preset

__all__ = ["SECTIONS", "load_config_file", "load_config_files", "layered_config", "notebook_config",
           "merge_world_settings", "split_config_paths", "sweep_section"]

SECTIONS = ("preset", "sweep")  # top-level keys of a config file that are not TrainConfig fields


def load_config_file(path: str | Path) -> dict:
    """A YAML config file as a dict of TrainConfig fields (values parsed by their types), plus its sections.

    Raises:
        FileNotFoundError: no such file. ValueError: not YAML, not a mapping, an unknown key, a key given twice, a
            bad value, or too large (over `recast.bounded.MAX_CONFIG_BYTES`, or over `recast.bounded.MAX_NODES` values
            with its aliases expanded); each named.
    """
    from recast.io import read_bytes

    p = _find(path)
    if p is None:
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        text = read_bytes(p, MAX_CONFIG_BYTES, "config file").decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"--config {path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from None
    except OSError as err:  # a named pipe, a folder, unreadable
        raise ValueError(f"--config {path}: cannot be read ({err.strerror or err})") from None
    data = load_yaml(text, f"--config {path}", max_chars=None)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of TrainConfig fields, got a {type(data).__name__}")
    types = field_types()
    unknown = sorted(k for k in data if k not in types and k not in SECTIONS)
    if unknown:
        raise ValueError(f"--config {path}: unknown keys {unknown}; a config file holds TrainConfig fields "
                         f"({', '.join(sorted(types))}) and the sections {list(SECTIONS)}")
    _check_sections(data, f"--config {path}")
    return {k: (v if k in SECTIONS else _typed(k, v, f"--config {path}")) for k, v in data.items()
            if not (k in SECTIONS and v is None)}


def _find(path: str | Path) -> Path | None:
    """A config file as given, else under the repo root (the shipped configs/, from any working directory: a notebook
    runs in notebooks/); None where neither exists."""
    p = Path(path)
    if not p.exists() and not p.is_absolute() and (REPO_ROOT / p).exists():
        p = REPO_ROOT / p
    return p if p.exists() else None


def _check_sections(data: dict, where: str) -> None:
    """The sections that are not TrainConfig fields: ``preset`` a preset's name, ``sweep`` a mapping of budgets,
    methods and seeds (either may be empty: ``sweep:`` alone means none)."""
    name = data.get("preset")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"{where}: preset must be a preset's name (ci | cpu | gpu | sd35), got {short_repr(name)}")
    section = data.get("sweep")
    if section is not None and (not isinstance(section, dict) or set(section) - {"budgets", "methods", "seeds"}):
        raise ValueError(f"{where}: the sweep section is a mapping of budgets, methods and seeds, got "
                         f"{short_repr(section)}")


def split_config_paths(paths: str | Path) -> list[str]:
    """The files of ``--config``: comma-separated names, or one name that holds a comma where a file of exactly that
    name exists."""
    text = str(paths)
    if "," in text and _find(text.strip()) is not None:
        return [text.strip()]
    return [p.strip() for p in text.split(",") if p.strip()]


def load_config_files(paths: str | Path) -> dict:
    """One or more config files ("a.yaml,b.yaml"), each layered over the ones before it (world_settings and the
    sweep section merge key by key), as `load_config_file` reads each."""
    merged: dict = {}
    names = split_config_paths(paths)
    for path in names:
        if len(names) > 1 and _find(path) is None:
            raise FileNotFoundError(f"--config {path}: no such file (--config {paths} was read as {len(names)} "
                                    "comma-separated files)")
        for k, v in load_config_file(path).items():
            merged[k] = merge_world_settings(merged.get(k, {}), v) if k in ("world_settings", "sweep") else v
    return merged


def _typed(name: str, value, where: str):
    """A YAML value as TrainConfig field `name`'s type (strings go through the field's parser)."""
    typ = field_types()[name]
    if typ == "dict":
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"{where}: {name} must be a mapping of names to values, got {short_repr(value)}")
        return dict(value)
    if isinstance(value, str) and typ != "str":
        return parse_field(name, value)
    if typ.startswith("tuple[tuple"):
        if not isinstance(value, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in value):
            raise ValueError(f"{where}: {name} must be a list of rows of numbers, got {short_repr(value)}")
        return tuple(tuple(r) for r in value)
    if typ.startswith("tuple"):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: {name} must be a list ({typ}), got {short_repr(value)}")
        return tuple(value)
    if typ == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def merge_world_settings(base: dict, extra: dict) -> dict:
    """World settings of a later layer over an earlier one (a nested mapping such as ``prompt_files`` merges key by
    key, so a file may set the train prompts and leave the test prompts to the defaults)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def layered_config(preset_name: str | None = None, config_file: str | Path | None = None,
                   options: dict | None = None, sets: dict | None = None) -> TrainConfig:
    """The TrainConfig of the four layers (module docstring): preset, file, named options, ``--set`` values.

    Args:
        preset_name: the preset (None: the file's ``preset``, else "cpu").
        config_file: a YAML file, or None.
        options: named options already parsed (None values are skipped).
        sets: parsed ``--set`` values (`recast.config.parse_overrides`), ``world_settings`` merged key by key.
    """
    data = load_config_files(config_file) if config_file else {}
    name = preset_name or data.get("preset") or "cpu"
    layers = [{k: v for k, v in data.items() if k not in SECTIONS},
              {k: v for k, v in (options or {}).items() if v is not None}, dict(sets or {})]
    merged: dict = {}
    for layer in layers:
        ws = layer.pop("world_settings", None)
        merged.update(layer)
        if ws is not None:
            merged["world_settings"] = merge_world_settings(merged.get("world_settings", {}), ws)
    return preset(name, **merged)


def _given(name: str, value, typ: str) -> bool:
    """Whether a notebook parameter was given: "", [], {}, None and the sentinels below mean "not given"."""
    if value is None or (isinstance(value, (str, list, tuple, dict)) and len(value) == 0):
        return False
    if typ == "int" and name in ("iterations", "num_steps") and value == 0:
        return False
    if typ == "int" and name == "seed" and value == -1:
        return False
    return True


def notebook_config(preset_name: str = "", config: str = "", overrides: dict | None = None,
                    **params) -> TrainConfig:
    """A notebook's TrainConfig: preset, then its ``config`` file, then its named parameters that were given, then
    ``overrides`` (papermill ``-y "overrides: {field: value}"``). Papermill's ``-p`` passes strings; each is parsed
    by its field's type, so ``-p lam "[0.4, 0.6]"`` and ``-p iterations 30`` work and ``-p iterations abc`` is
    refused naming the field.

    Raises:
        ValueError: an unknown parameter or field, or a value that does not parse (naming it).
    """
    types = field_types()
    unknown = sorted(set(params) - set(types)) + sorted(set(overrides or {}) - set(types))
    if unknown:
        raise ValueError(f"unknown TrainConfig fields {unknown}; valid fields: {', '.join(sorted(types))}")
    given = {k: _typed(k, v, "notebook parameter") for k, v in params.items() if _given(k, v, types[k])}
    over = {k: _typed(k, v, "notebook overrides") for k, v in (overrides or {}).items()}
    return layered_config(preset_name or None, config or None, given, over)


def config_fields() -> tuple[str, ...]:
    """Every TrainConfig field name (for docs and tests)."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig))


def sweep_section(config: str) -> dict:
    """The ``sweep`` section of config files (budgets, methods, seeds for notebooks 05 and 06); {} without files."""
    if not config:
        return {}
    section = load_config_files(config).get("sweep") or {}
    if not isinstance(section, dict) or set(section) - {"budgets", "methods", "seeds"}:
        raise ValueError(f"--config {config}: the sweep section holds budgets, methods and seeds, got "
                         f"{short_repr(section)}")
    return section

"""Helpers shared by test modules (pytest puts tests/ on sys.path: ``from helpers import load_script``)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str, folder: str = "research/probes"):
    """``<repo>/<folder>/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_rows_match(saved: list[dict], table: list[dict], name: str) -> None:
    """A table as `recast.io.read_csv` gives it back equals the rows an analysis computes now: floats to 1e-9
    relative, inf and nan as the empty cells `write_csv` stores, everything else as text."""
    import math

    import pytest

    assert len(saved) == len(table), name
    for want, got in zip(saved, table):
        for k, v in got.items():
            if isinstance(v, float) and math.isfinite(v):
                assert want[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (name, k)
            elif isinstance(v, float):  # write_csv stores inf and nan as empty cells (JSON has neither)
                assert want[k] is None or str(want[k]) == str(v), (name, k)
            else:
                assert str(want[k]) == str(v), (name, k)

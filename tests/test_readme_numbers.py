"""The README's test counts are generated from pytest's own collection, tier by tier as the Makefile selects them,
and a test recounts them; a tier's time says when it was measured on another number of tests."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tables():
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "scripts" / "readme_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tables = _tables()


def test_each_tier_selects_what_its_make_target_runs(tmp_path):
    makefile = tmp_path / "Makefile"
    makefile.write_text('test: x\n\t$(BIN)/python -m pytest --nbmake tests notebooks\n\n'
                        'test-fast: x\n\t$(BIN)/python -m pytest tests -m "not slow and not gpu" -q\n\n'
                        'test-notebooks: x\n\t$(BIN)/python -m pytest --nbmake notebooks -q\n\nbench: x\n\techo\n')
    assert tables.tier_selection("make test", makefile) == (("tests", "notebooks"), "")
    assert tables.tier_selection("make test-fast", makefile) == (("tests",), "not slow and not gpu")
    assert tables.tier_selection("make test-notebooks", makefile) == (("notebooks",), "")
    assert tables.tier_selection("pytest -m gpu", makefile) == (("tests",), "gpu")
    with pytest.raises(ValueError, match="no pytest command in the recipe of 'bench'"):
        tables.tier_selection("make bench", makefile)
    # the repository's own Makefile: the unit tier is everything not slow, research or gpu
    assert tables.tier_selection("make test-fast") == (("tests",), "not slow and not research and not gpu")


def test_tier_counts_follow_the_markers():
    items = [("tests/test_a.py::t1", frozenset()), ("tests/test_a.py::t2", frozenset({"slow"})),
             ("tests/research/test_r.py::t", frozenset({"research", "slow"})), ("tests/test_g.py::t", frozenset({"gpu"})),
             ("notebooks/00.ipynb::", frozenset({"notebook"}))]
    counts = tables.tier_counts(items)
    assert counts == {"all (CI)": 5, "unit": 1, "slow": 1, "research": 1, "notebook": 1, "gpu": 1}


def test_a_time_measured_at_another_count_says_so(monkeypatch, tmp_path):
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"unit": {"seconds": 68, "tests": 916}, "slow": {"seconds": 540, "tests": 40,
                                                                                  "about": True},
                                 "all (CI)": {"seconds": 1050, "tests": None, "on": "2 busy cores"}}))
    monkeypatch.setattr(tables, "TIERS_TIMES", times)
    counts = {"all (CI)": 1000, "unit": 916, "slow": 41, "research": 3, "notebook": 10, "gpu": 2}
    rows = {r.split(" | ")[0].strip("| "): r.split(" | ") for r in tables.tests_table(counts=counts).splitlines()[2:]}
    assert rows["unit"][3:] == ["916", "68 s |"]
    assert rows["slow"][3:] == ["41", "about 9 min (timed at 40 tests) |"]
    assert rows["all (CI)"][3:] == ["1,000", "17.5 min (2 busy cores; its count then not recorded) |"]
    assert rows["research"][3:] == ["3", " |"]


@pytest.mark.slow
def test_the_readme_test_counts_are_the_collected_ones():
    """`scripts/readme_tables.py --check --live` collects every test now and compares the README's tests table with
    what it generates (run `make readme-tables` after adding or removing tests)."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_tables.py"), "--check", "--live"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-2000:]

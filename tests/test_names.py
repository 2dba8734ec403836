"""Every install instruction names this package's distribution (`recast-credit`; `recast` on the public index is an
unrelated package), every optional module maps to the extra that installs it, and a missing optional package stops a
command before anything loads: one line naming it and the command that installs it, exit 2."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from recast.extras import DISTRIBUTION, EXTRAS, missing, pip_hint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements(extra: str, seen=()) -> set[str]:
    """An extra's distributions, its own extras expanded (lower-case, '-' for '_')."""
    out = set()
    for req in PROJECT["optional-dependencies"][extra]:
        own = re.fullmatch(re.escape(PROJECT["name"]) + r"\[([\w,]+)\]", req)
        if own:
            out |= {d for sub in own.group(1).split(",") if sub not in seen for d in _requirements(sub, (*seen, extra))}
        else:
            out.add(re.split(r"[<>=!~\[ ;]", req)[0].lower().replace("_", "-"))
    return out


def test_the_distribution_is_the_one_pyproject_builds_and_the_installed_one():
    assert PROJECT["name"] == DISTRIBUTION
    assert importlib.metadata.version(DISTRIBUTION)  # this environment installed it under that name
    # not on the public index yet: every hint installs from a clone or a built wheel
    assert pip_hint() == "pip install -e '.' in a clone (or pip install 'recast_credit-<version>-py3-none-any.whl')"
    assert pip_hint("ocr").startswith("pip install -e '.[ocr]' in a clone (or pip install 'recast_credit-")


def test_each_optional_module_comes_from_the_extra_named_for_it():
    """Checked against what installed each module here (importlib.metadata), so a mapping cannot name the wrong extra."""
    owners = importlib.metadata.packages_distributions()
    checked = 0
    for module, extra in EXTRAS.items():
        assert extra in PROJECT["optional-dependencies"], (module, extra)
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [])}
        if dists:  # installed here (wandb is not part of the dev install)
            assert dists & _requirements(extra), f"{module} comes from {dists}, not from the extra {extra!r}"
            checked += 1
    assert checked >= len(EXTRAS) - 1


_INSTALL = re.compile(r"pip install\s+(?:-e\s+)?['\"]?([\w.\-]+)(\[[\w,]+\])?")


def _install_lines() -> list[tuple[str, str]]:
    """(file, the distribution named) of every `pip install NAME` in the docs, the package and the scripts."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "recast").rglob("*.py"),
             *(ROOT / "examples").glob("*.py"), ROOT / "environment.yml", ROOT / "constraints.txt"]
    found = []
    for path in files:
        for m in _INSTALL.finditer(path.read_text()):
            found.append((str(path.relative_to(ROOT)), m.group(1)))
    return found


def test_no_instruction_installs_the_unrelated_recast_package():
    """An install of the package names a clone (`.`) or a built wheel: never the bare `recast` of the index, nor
    `recast-credit`, which is not on the public index yet (issue 71: `pip install recast-credit` found nothing)."""
    lines = _install_lines()
    assert any(name == "." for _, name in lines)
    wrong = [(f, name) for f, name in lines if name.lower() in ("recast", "recast-diffusion", DISTRIBUTION)]
    assert not wrong, wrong


def test_missing_reports_modules_that_cannot_be_found():
    assert missing(["json", "no_such_module_recast_test", "no_such_parent.child"]) == [
        "no_such_module_recast_test", "no_such_parent.child"]


def test_a_composition_run_without_the_ocr_package_stops_before_anything_loads(monkeypatch, capsys, tmp_path):
    """The sd3 world's composition setting trains the ocr reward: without rapidocr the run stops at validation, with
    one line naming the package and the install command, and exit 2; no pipeline is read."""
    import importlib.util

    import recast.world as world_mod
    from recast.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "rapidocr_onnxruntime" else real(name, *a))
    monkeypatch.setattr(world_mod, "load_world", lambda *a, **k: pytest.fail("the world was loaded"))
    pipeline = tmp_path / "sd35"
    pipeline.mkdir()
    (pipeline / "model_index.json").write_text("{}")
    code = main(["train", "--config", "configs/sd35_composition.yaml,configs/smoke.yaml", "--world",
                 f"sd3:{pipeline}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "rapidocr-onnxruntime" in err[0] and pip_hint("ocr") in err[0] and "'ocr'" in err[0]
    assert not (tmp_path / "run" / "checkpoint.pt").exists()

"""The package's metadata: a light core, extras that carry the stack, and CI running the README's command (the install
itself, conda's included: tests/test_install.py)."""

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _names(reqs) -> set[str]:
    return {re.split(r"[<>=!~\[ ]", d)[0].lower() for d in reqs}


def _extra(project: dict, name: str, seen=()) -> set[str]:
    """An extra's requirements with the package's own extras (``recast-credit[a,b]``) expanded."""
    out = set()
    for req in project["optional-dependencies"][name]:
        own = re.fullmatch(re.escape(project["name"]) + r"\[([\w,]+)\]", req)
        if own:
            for sub in own.group(1).split(","):
                if sub not in seen:
                    out |= _extra(project, sub, (*seen, name))
        else:
            out |= _names([req])
    return out


def test_constraints_pin_torch_and_the_core_needs_only_torch_and_numpy():
    """The core installs light (someone else's trainer needs no framework of ours); the extras carry the stack, and
    the dev extra that CI installs holds all of it."""
    assert re.search(r"^torch==\d+\.\d+\.\d+$", (ROOT / "constraints.txt").read_text(), re.M)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _names(project["dependencies"]) == {"torch", "numpy"}
    assert {"diffusers", "transformers", "accelerate", "peft", "safetensors", "tqdm", "pyyaml"} <= _extra(project, "train")
    assert {"matplotlib", "seaborn"} <= _extra(project, "plot")
    assert {"jupyterlab", "ipykernel", "papermill", "nbmake", "matplotlib", "seaborn", "scikit-learn",
            "diffusers"} <= _extra(project, "notebooks")
    extras = project["optional-dependencies"]
    assert set().union(*(_extra(project, e) for e in extras if e != "dev")) == _extra(project, "all")  # all is all
    every = set().union(*(_extra(project, e) for e in extras if e not in ("dev", "all", "wandb")))
    assert every | {"pytest", "hypothesis"} <= _extra(project, "dev")


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and re.search(r"^make test$", ci, re.M)


def test_notebooks_are_committed_without_outputs_and_have_one_parameters_cell():
    import json

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), f"{path.name} has outputs"
        tagged = [i for i, c in enumerate(code) if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert tagged == [1], f"{path.name}: the parameters cell must be the second code cell, and the only one"


def test_papermill_reads_every_parameter_with_its_type_and_help(caplog):
    """`papermill -p NAME VALUE` must know every parameter: a line it cannot parse (e.g. a second `=` in the help
    comment) makes it warn "Unable to parse line" and "Passed unknown parameter" on every batch run."""
    import ast
    import json
    import logging

    import papermill

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
        assigned = [n.target.id for n in ast.parse("".join(cell["source"])).body if isinstance(n, ast.AnnAssign)]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="papermill"):
            found = papermill.inspect_notebook(str(path))
        assert not [r.getMessage() for r in caplog.records if "Unable to parse" in r.getMessage()], path.name
        assert list(found) == assigned, f"{path.name}: papermill sees {list(found)}, the cell assigns {assigned}"
        assert all(p["inferred_type_name"] != "None" and p["help"] for p in found.values()), path.name


def test_atomic_writes_get_the_mode_a_plain_open_would(tmp_path):
    import os
    import stat

    from recast.io import atomic_write_bytes, current_umask

    path = atomic_write_bytes(tmp_path / "x.json", b"{}")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~current_umask()
    assert path.read_bytes() == b"{}" and not list(tmp_path.glob("*.tmp"))


def test_the_license_file_is_the_licence_pyproject_declares():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "LICENSE").read_text()
    assert project["license"] == "Apache-2.0"
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS AND CONDITIONS" in text

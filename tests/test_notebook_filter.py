"""Notebooks stay clean in git: `make install` (scripts/install.py) makes nbstripout the clone's git filter for
`*.ipynb` (.gitattributes), so a notebook JupyterLab saved with outputs, execution counts, images and its kernel's
metadata is committed exactly as it was before, while the working copy keeps what it shows. Every git command here
runs in a temporary repository: nothing in this clone is touched."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "notebooks/03_train.ipynb"

pytestmark = pytest.mark.skipif(shutil.which("git") is None or importlib.util.find_spec("nbstripout") is None,
                                reason="needs git and nbstripout (the dev extra)")


def _install_module():
    spec = importlib.util.spec_from_file_location("install_script", ROOT / "scripts" / "install.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


install = _install_module()


@pytest.fixture
def git_env(tmp_path, monkeypatch):
    """git without the user's or the system's configuration, with an identity for commits."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for key, value in (("GIT_AUTHOR_NAME", "t"), ("GIT_AUTHOR_EMAIL", "t@t"), ("GIT_COMMITTER_NAME", "t"),
                       ("GIT_COMMITTER_EMAIL", "t@t")):
        monkeypatch.setenv(key, value)


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _jupyterlab_save(path: Path) -> None:
    """What a JupyterLab session leaves in a notebook: execution counts, stream, result and PNG outputs, per-cell
    execution timestamps, the running kernel's language_info and widget state; written as JupyterLab writes (nbformat,
    indent 1, keys sorted)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg=="
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.execution_count = count
        cell.metadata["execution"] = {"iopub.execute_input": "2026-12-07T05:00:00.000Z"}
        cell.metadata["scrolled"] = True
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="30 iterations\n"),
                        nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
                        nbformat.v4.new_output("execute_result", data={"text/plain": "42"}, execution_count=count)]
    nb.metadata["language_info"] = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                    "mimetype": "text/x-python", "name": "python", "version": "3.11.9"}
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    nbformat.write(nb, path)


def _clone(tmp_path: Path) -> Path:
    """A git repository holding the committed .gitattributes and one committed notebook, as in this clone."""
    repo = tmp_path / "clone"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    shutil.copy(ROOT / NOTEBOOK, repo / NOTEBOOK)
    _git(repo, "init", "-q")
    _git(repo, "add", ".gitattributes", NOTEBOOK)
    _git(repo, "commit", "-q", "-m", "committed as in the clone")
    return repo


def test_gitattributes_name_the_filter_and_the_install_pins_it():
    attrs = (ROOT / ".gitattributes").read_text().splitlines()
    assert "*.ipynb filter=nbstripout" in attrs and "*.ipynb diff=ipynb" in attrs
    assert re.search(r"^nbstripout==[\d.]+$", (ROOT / "constraints.txt").read_text(), re.M)
    import tomllib

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(r.startswith("nbstripout") for r in dev)


def test_the_filter_leaves_every_committed_notebook_as_it_is():
    """So setting the filter up never shows a committed notebook as modified."""
    clean = install.git_filter_plan(sys.executable)[1][-1]  # the command git runs: the file on stdin, git's on stdout
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    # the same command, given every notebook at once with -t (what it writes for each, one after another)
    out = subprocess.run(f"{clean} -t " + " ".join(f'"{p}"' for p in paths), shell=True, capture_output=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    if out.stdout != b"".join(p.read_bytes() for p in paths):
        for path in paths:  # which one, through the filter exactly as git runs it
            one = subprocess.run(clean, shell=True, input=path.read_bytes(), capture_output=True, timeout=60)
            assert one.stdout == path.read_bytes(), f"{path.name} would change on its next commit"


@pytest.mark.slow
def test_a_notebook_saved_by_jupyterlab_is_committed_without_its_outputs(tmp_path, git_env):
    repo = _clone(tmp_path)
    assert install.install_git_filter(sys.executable, repo)  # what `make install` runs in a clone
    assert _git(repo, "config", "filter.nbstripout.clean").strip() == install.git_filter_plan(sys.executable)[1][-1]
    assert (repo / ".gitattributes").read_bytes() == (ROOT / ".gitattributes").read_bytes()  # no line appended

    nb_path = repo / NOTEBOOK
    _jupyterlab_save(nb_path)
    saved = json.loads(nb_path.read_text())
    assert all(c["outputs"] and c["execution_count"] for c in saved["cells"] if c["cell_type"] == "code")
    # git status lists the file (its size changed) until the next `git add`, but there is nothing to commit in it
    assert _git(repo, "diff", "--stat") == ""
    _git(repo, "add", NOTEBOOK)
    assert _git(repo, "status", "--porcelain") == ""
    staged = _git(repo, "show", f":{NOTEBOOK}")
    assert staged.encode() == (ROOT / NOTEBOOK).read_bytes()  # byte for byte the committed notebook
    stored = json.loads(staged)
    for cell, before in zip(stored["cells"], saved["cells"], strict=True):
        assert cell["source"] == before["source"] and cell.get("id") == before.get("id")
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
            assert "execution" not in cell["metadata"] and "scrolled" not in cell["metadata"]
    assert "language_info" not in stored["metadata"] and "widgets" not in stored["metadata"]
    assert json.loads(nb_path.read_text()) == saved  # the working copy keeps its outputs

    # an edit to a source cell is committed, still without outputs
    nb = json.loads(nb_path.read_text())
    nb["cells"][-1]["source"] = ["print('edited')\n"]
    nb_path.write_text(json.dumps(nb, indent=1))
    _git(repo, "commit", "-q", "-m", "edited", NOTEBOOK)
    committed = json.loads(_git(repo, "show", f"HEAD:{NOTEBOOK}"))
    assert committed["cells"][-1]["source"] == ["print('edited')\n"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in committed["cells"]
               if c["cell_type"] == "code")


def test_outside_a_git_checkout_the_filter_is_skipped(tmp_path, git_env, capsys):
    (tmp_path / "sdist").mkdir()
    assert not install.git_checkout(tmp_path / "sdist")
    assert install.install_git_filter(sys.executable, tmp_path / "sdist") is False
    assert "not a git checkout" in capsys.readouterr().err
    assert os.listdir(tmp_path / "sdist") == []

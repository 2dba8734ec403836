"""Every entry point runs torch on one CPU thread per process unless told otherwise: on a shared machine torch's
default (every core, in every process) oversubscribes the cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from recast.config import TrainConfig, preset

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def threads():
    """Restore this process's torch threads after a test that changes them."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_every_preset_trains_on_one_thread_unless_told():
    assert TrainConfig().num_threads == 1
    for name in ("ci", "cpu", "gpu", "sd35"):
        assert preset(name).num_threads == 1, name
        assert preset(name, num_threads=4).num_threads == 4, name


def test_train_applies_the_config_and_set_overrides_it(threads, tmp_path):
    from recast.cli import main

    torch.set_num_threads(2)
    assert main(["train", "--preset", "ci", "--set", "iterations=1", "--out", str(tmp_path / "a")]) == 0
    assert torch.get_num_threads() == 1
    assert main(["train", "--preset", "ci", "--set", "iterations=1", "--set", "num_threads=2",
                 "--out", str(tmp_path / "b")]) == 0
    assert torch.get_num_threads() == 2
    assert json.loads((tmp_path / "b" / "config.json").read_text())["num_threads"] == 2


def test_profile_runs_on_one_thread_unless_told(threads, monkeypatch):
    import recast.experiments.profile as profile
    from recast.cli import main

    seen = []
    monkeypatch.setattr(profile, "run", lambda args: seen.append(torch.get_num_threads()) or 0)
    torch.set_num_threads(2)
    assert main(["profile"]) == 0
    assert main(["profile", "--num-threads", "2"]) == 0
    torch.set_num_threads(1)
    assert main(["profile", "--num-threads", "0"]) == 0  # 0 leaves the process's threads as they are
    assert seen == [1, 2, 1]
    assert main(["profile", "--num-threads", "-1"]) == 2


def _parameters(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "".join(next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))["source"])


def test_notebooks_that_compute_in_their_kernel_default_to_one_thread():
    """00 (pretraining), 02 (sampling and continuations), 06 (sampling every policy) and 09 (two training loops)
    compute in the kernel; 03 and 07 train through TrainConfig (one thread unless `overrides` says otherwise); the
    sweeps' runs are single-threaded processes."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        namespace: dict = {}
        exec(_parameters(path), namespace)
        if "num_threads" in namespace:
            found[path.name[:2]] = namespace["num_threads"]
    assert found == {"00": 1, "02": 1, "06": 1, "09": 1}

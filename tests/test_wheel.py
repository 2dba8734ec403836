"""The package runs from a wheel outside the clone: built here, installed into an empty folder, run from another."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(base / "dist")], check=True, capture_output=True, cwd=base)
    (wheel,) = (base / "dist").glob("recast_credit-*.whl")  # the distribution recast-credit, normalised
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(base / "site"),
                    str(wheel)], check=True, capture_output=True)
    return wheel, base / "site"


def _run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("RECAST_DATA_ROOT", None)
    return subprocess.run([sys.executable, "-m", "recast", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_wheel_carries_the_embedded_world(installed):
    import zipfile

    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("recast/_data/digit_base/world.json", "recast/_data/digit_base/transformer.safetensors",
                   "recast/_data/judges/judge_features.safetensors", "recast/_data/rewards/digit_cnn.safetensors",
                   "recast/_data/prompts/compose_train.jsonl", "recast/_data/profiles/digit_base_renderings_T6.npz",
                   "recast/credit/__init__.py"):
        assert needed in names, needed
    # the licence travels with the wheel (issue 71: there was no LICENSE file)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), [n for n in names if "dist-info" in n]


@pytest.mark.parametrize("args", [
    ("train", "--preset", "ci", "--out", "ci_run"),
    ("train", "--preset", "ci", "--world", "sd3-tiny", "--rewards", "jpeg,colour_entropy", "--out", "sd3_run"),
    ("train", "--preset", "cpu", "--iterations", "1", "--set", "eval_prompts=4", "--out", "base_run"),
    ("demo", "--preset", "ci", "--seeds", "0,1", "--iterations", "1", "--out", "demo"),
])
def test_commands_run_from_an_empty_folder_outside_the_clone(installed, tmp_path, args):
    _, site = installed
    out = _run(site, tmp_path, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    probe = subprocess.run([sys.executable, "-c", "import recast.config as c; print(c.DATA_ROOT)"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert probe.stdout.strip() == str(site / "recast" / "_data")


def test_a_failed_start_leaves_nothing_that_blocks_its_retry(installed, tmp_path):
    _, site = installed
    bad = _run(site, tmp_path, "train", "--preset", "ci", "--world", "sd3-tiny", "--rewards", "pickscore", "--out",
               "run")
    assert bad.returncode == 2 and "pickscore" in bad.stderr and "Traceback" not in bad.stderr
    ok = _run(site, tmp_path, "train", "--preset", "ci", "--world", "sd3-tiny", "--rewards", "jpeg", "--out", "run")
    assert ok.returncode == 0, ok.stderr[-3000:]

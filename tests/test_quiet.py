"""The libraries' known, harmless messages (torchvision's absence, SD3's prompt truncation) are dropped at their loggers
once `recast` is imported; every other message of those loggers still gets through."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import recast  # noqa: F401 - installs the filters
from recast.quiet import QUIET, install

ROOT = Path(__file__).resolve().parents[1]


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("name,prefix", [(n, p) for n, p, _ in QUIET])
def test_each_known_message_is_dropped_and_others_of_its_logger_kept(name, prefix):
    install()  # a second install adds nothing
    logger = logging.getLogger(name)
    assert sum(type(f).__name__ == "_Drop" for f in logger.filters) == 1
    keep = _Keep()
    logger.addHandler(keep)
    try:
        logger.warning(prefix + " and the rest of the message %s", "with arguments")
        logger.warning("another warning of the same library")
        logger.warning("%s", prefix)  # the message as formatted is what counts
    finally:
        logger.removeHandler(keep)
    assert keep.messages == ["another warning of the same library"]


@pytest.mark.slow
def test_a_tiny_sd3_run_prints_only_its_result(tmp_path):
    """Before: two torchvision lines on every command and 44 KB of truncation warnings per sd3-tiny run."""
    out = subprocess.run([sys.executable, "-m", "recast", "train", "--config", "configs/sd3_tiny.yaml", "--set",
                          "iterations=1", "--out", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == "" and out.stdout.splitlines() == [out.stdout.splitlines()[-1]]
    assert out.stdout.startswith("done: 1 iterations")

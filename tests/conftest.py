"""Test-session setup shared by the unit tests and the notebook runs (nbmake kernels inherit the environment)."""

import os
import shutil
import tempfile

import pytest
from hypothesis import settings

# CI replays a fixed set of examples (a green main stays green); local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Notebooks and library code write figures through recast.plotting.savefig; under test they go to a scratch folder
# so a test run never overwrites the committed figures/. Likewise result tables (recast.experiments.sweep.results_dir), so
# CI-sized notebook runs never overwrite research/tables/. Scratch folders this session made are removed when it ends.
_SCRATCH = []
for _var, _prefix in (("RECAST_FIGURES_DIR", "recast-figures-"), ("RECAST_RESULTS_DIR", "recast-results-")):
    if _var not in os.environ:
        os.environ[_var] = tempfile.mkdtemp(prefix=_prefix)
        _SCRATCH.append(os.environ[_var])


def pytest_sessionfinish(session, exitstatus):
    for path in _SCRATCH:
        shutil.rmtree(path, ignore_errors=True)


TIERS = """Test tiers (README "Tests"; markers are set here, by folder, or on the test):
  unit      every test under tests/ not marked otherwise: the library's properties and closed forms (make test-fast)
  slow      a library test that trains, samples many images or spawns processes (more than about a second)
  research  pins a committed research table, probe script or probe world (tests/research/, or marked in place)
  notebook  a notebook run end to end by nbmake (notebooks/)
  gpu       needs a CUDA device (skipped without one)"""


def pytest_collection_modifyitems(config, items):
    """Mark each test's tier (`TIERS`), and skip `gpu`-marked tests on machines without CUDA, with the reason shown."""
    for item in items:
        path = item.path.as_posix()
        if "/tests/research/" in path:
            item.add_marker(pytest.mark.research)
        elif path.endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _primary_palette():
    """The palette is process-wide (`recast.worlds.digits.data.set_palette`; `load_world` sets a world's own): every test
    starts and ends in the default world's, so a test that loads a probe world cannot leak its colours."""
    from recast.worlds.digits import data

    data.set_palette("primary")
    yield
    data.set_palette("primary")

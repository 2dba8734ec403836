"""The install that `make demo` and `make test` run (scripts/install.py): the CPU build of torch from PyTorch's CPU
index when it answers, pip's own configuration when it does not, the CUDA build when asked; the Makefile's wiring of
it; conda going through the same script. Reachability is simulated with servers on the loopback address: no test
here touches the network."""

from __future__ import annotations

import http.server
import importlib.util
import platform
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = "/env/bin/python"


def _install_module():
    spec = importlib.util.spec_from_file_location("install_script", ROOT / "scripts" / "install.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


install = _install_module()


def _torch_steps(steps: list[list[str]]) -> list[list[str]]:
    return [s for s in steps if any(a.startswith("torch") for a in s)]


def test_linux_with_the_cpu_index_reachable_takes_torch_from_it_then_the_package_from_pip():
    steps = install.plan(PY, system="Linux", reachable=True, pin="torch==2.13.0")
    assert steps[0] == [PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip"]
    assert _torch_steps(steps) == [[PY, "-m", "pip", "install", "--quiet", "--upgrade", "--index-url",
                                    "https://download.pytorch.org/whl/cpu", "torch==2.13.0"]]
    assert steps[-1] == [PY, "-m", "pip", "install", "--quiet", "-c", "constraints.txt", "-e", ".[dev]"]
    assert steps.index(_torch_steps(steps)[0]) < len(steps) - 1  # torch first, so the package keeps it


def test_linux_without_the_cpu_index_leaves_torch_to_pips_configuration():
    steps = install.plan(PY, system="Linux", reachable=False, pin="torch==2.13.0")
    assert _torch_steps(steps) == [install.fallback(PY, "torch==2.13.0")]
    assert install.fallback(PY, "torch==2.13.0") == [PY, "-m", "pip", "install", "--quiet", "-c", "constraints.txt",
                                                     "torch==2.13.0"]
    assert not any("--index-url" in s for s in steps)
    assert steps[-1][-2:] == ["-e", ".[dev]"]


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_other_systems_never_need_the_cpu_index(system):
    """Their public wheels are CPU builds already."""
    assert install.plan(PY, system=system, reachable=True) == install.plan(PY, system="Linux", reachable=False)


def test_cuda_replaces_an_installed_cpu_build_and_uses_pips_configuration():
    uninstall = [PY, "-m", "pip", "uninstall", "--yes", "--quiet", "torch"]
    steps = install.plan(PY, variant="cuda", system="Linux", reachable=True, pin="torch==2.13.0",
                         installed="2.13.0+cpu")
    assert uninstall in steps and steps.index(uninstall) < steps.index(install.fallback(PY, "torch==2.13.0"))
    assert not any("--index-url" in s for s in steps)
    for installed in (None, "2.13.0"):  # nothing to replace: no CUDA build is uninstalled and downloaded again
        steps = install.plan(PY, variant="cuda", pin="torch==2.13.0", installed=installed)
        assert uninstall not in steps and _torch_steps(steps) == [install.fallback(PY, "torch==2.13.0")]


def test_installed_torch_is_this_environments():
    import importlib.metadata

    assert install.installed_torch() == importlib.metadata.version("torch")


def test_an_install_under_the_old_name_is_removed_before_the_package_goes_in(tmp_path):
    steps = install.plan(PY, stale=True)
    assert steps[-2] == [PY, "-m", "pip", "uninstall", "--yes", "--quiet", "recast"]
    assert not any(s[3] == "uninstall" for s in install.plan(PY, stale=False))
    assert install.stale_install(tmp_path) is False  # no editable install of that folder in this environment


def test_the_old_install_is_found_in_site_packages_only(tmp_path, monkeypatch):
    """An editable `recast` of this checkout in site-packages is stale; one of another folder is not; a
    `recast.egg-info` in the working directory (an old build's leftover on sys.path) is no install at all."""
    import json
    import sysconfig

    site, cwd, checkout = tmp_path / "site", tmp_path / "cwd", tmp_path / "checkout"
    for d in (site, cwd, checkout):
        d.mkdir()
    info = site / "recast-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: recast\nVersion: 0.1\n")
    (info / "direct_url.json").write_text(json.dumps({"url": checkout.resolve().as_uri(), "dir_info": {}}))
    (cwd / "recast.egg-info").mkdir()
    (cwd / "recast.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: recast\nVersion: 0.1\n")
    monkeypatch.syspath_prepend(str(cwd))
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"purelib": str(site), "platlib": str(site)})
    assert install.stale_install(checkout) is True
    assert install.stale_install(tmp_path) is False
    info.rename(tmp_path / "gone")  # only the working directory's egg-info is left
    assert install.stale_install(checkout) is False


def test_plan_refuses_an_unknown_variant():
    with pytest.raises(ValueError, match="--torch must be one of cpu, cuda, got 'rocm'"):
        install.plan(PY, variant="rocm")


def test_the_pin_comes_from_the_constraints_file(tmp_path):
    assert install.torch_pin() == next(line for line in (ROOT / "constraints.txt").read_text().splitlines()
                                       if line.startswith("torch=="))
    (tmp_path / "c.txt").write_text("# nothing pinned\ntorch>=2.4\n")
    with pytest.raises(ValueError, match="c.txt: no 'torch==X.Y.Z' line"):
        install.torch_pin(tmp_path / "c.txt")


class _Index(http.server.BaseHTTPRequestHandler):
    """A wheel index on the loopback address that has a torch page (and nothing else)."""

    def do_GET(self):  # noqa: N802
        body = b"<html>torch-2.13.0+cpu</html>"
        self.send_response(200 if self.path == "/whl/cpu/torch/" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def index():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()


@pytest.fixture
def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"  # nothing listens there once the socket is closed


def test_reachability_is_an_answer_with_the_torch_page(index, closed_port):
    assert install.index_reachable(index)
    assert not install.index_reachable(index.replace("/whl/cpu", "/elsewhere"))  # answers, but no torch page: 404
    assert not install.index_reachable(closed_port, timeout=2)
    assert not install.index_reachable("not a url")


def _dry_run(url: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, str(ROOT / "scripts" / "install.py"), "--dry-run"], capture_output=True,
                          text=True, env={**os.environ, "RECAST_CPU_INDEX": url}, timeout=60)


@pytest.mark.skipif(platform.system() != "Linux", reason="the CPU index is only tried on Linux")
def test_the_script_prints_the_pip_commands_it_would_run_with_the_index_up_and_down(index, closed_port):
    pin = install.torch_pin()
    # in a git checkout, the notebooks' git filter is set up after the pip commands (tests/test_notebook_filter.py)
    git = [" ".join(c) for c in install.git_filter_plan(sys.executable)] if install.git_checkout(ROOT) else []
    up = _dry_run(index)
    assert up.returncode == 0, up.stderr
    commands = [line[2:] for line in up.stdout.splitlines() if line.startswith("$ ")]
    assert commands == [" ".join(c) for c in install.plan(sys.executable, reachable=True, pin=pin, index=index,
                                                                      stale=install.stale_install())] + git
    assert f"--index-url {index} {pin}" in commands[1]
    down = _dry_run(closed_port)
    assert down.returncode == 0, down.stderr
    commands = [line[2:] for line in down.stdout.splitlines() if line.startswith("$ ")]
    assert commands == [" ".join(c) for c in install.plan(sys.executable, reachable=False, pin=pin,
                                                                      stale=install.stale_install())] + git
    assert "is not reachable" in down.stderr and "--index-url" not in down.stdout


@pytest.fixture
def makedir(tmp_path):
    """A copy of the Makefile with the files its install rule depends on."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml", "constraints.txt", "scripts/install.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _make_n(cwd: Path, *args: str) -> str:
    out = subprocess.run(["make", "-n", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_installs_through_the_script_and_keeps_the_torch_build_it_was_given(makedir):
    for target in ("demo", "test", "install"):
        assert "scripts/install.py --torch cpu" in _make_n(makedir, target)
    assert "scripts/install.py --torch cuda" in _make_n(makedir, "install", "TORCH=cuda")
    # once a build is installed, later commands keep it: no CPU reinstall over a CUDA install
    (makedir / ".venv").mkdir()
    (makedir / ".venv" / ".torch").write_text("cuda\n")
    (makedir / ".venv" / ".installed-cuda").touch()
    assert "scripts/install.py" not in _make_n(makedir, "test")
    assert "scripts/install.py --torch cpu" in _make_n(makedir, "install", "TORCH=cpu")


def test_conda_installs_through_the_same_script():
    """environment.yml supplies Python and pip only (a pip section would bypass the CPU index's fallback), with a
    Python the package supports."""
    import re

    import tomllib
    import yaml

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert all(isinstance(d, str) for d in deps), "no pip section: the install goes through scripts/install.py"
    assert {re.split(r"[=<>]", d)[0] for d in deps} == {"python", "pip"}
    py = next(d for d in deps if d.startswith("python=")).split("=")[1]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires.startswith(">=") and tuple(map(int, py.split("."))) >= tuple(map(int, requires[2:].split(".")))

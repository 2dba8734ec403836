"""Install the package, with the CPU build of torch, into the Python that runs this script (`make` runs it in .venv).

    python scripts/install.py                 # CPU torch, then the package with its dev extra
    python scripts/install.py --torch cuda    # the CUDA build of torch instead (a GPU box; `make install TORCH=cuda`)
    python scripts/install.py --dry-run       # print the pip commands it would run, run nothing

In a git clone it then sets up nbstripout as the notebooks' git filter (`.gitattributes` names it): a notebook is
committed without its outputs and execution counts, whatever JupyterLab saved; outside a git checkout it skips that.

Why a script: on Linux the public index's torch wheel is the CUDA build (about 0.5 GB plus several GB of CUDA
libraries), while PyTorch's CPU wheel index serves the same version as ``+cpu``. The CPU index is tried first; when it
cannot be reached in a few seconds, pip's own configuration decides (a mirror, a local wheel folder, or the public
index, where Linux gets the CUDA build), and the script says so. Other systems' public wheels are CPU builds already.
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = "constraints.txt"  # relative to the repository root, where the commands run
# PyTorch's CPU wheel index; RECAST_CPU_INDEX points the probe and the install elsewhere (a mirror of it, or a test)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
VARIANTS = ("cpu", "cuda")
GPU_HINT = "make install TORCH=cuda"  # the one line a GPU user runs instead (README, the script's closing message)


def torch_pin(constraints: str | os.PathLike = ROOT / CONSTRAINTS) -> str:
    """The ``torch==X.Y.Z`` line of the constraints file.

    Raises:
        ValueError: the file pins no exact torch version.
    """
    found = re.search(r"^torch==[\w.]+$", Path(constraints).read_text(), re.M)
    if not found:
        raise ValueError(f"{constraints}: no 'torch==X.Y.Z' line to install")
    return found.group(0)


def index_reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url``'s torch page answers with HTTP 200 within ``timeout`` seconds (honours https_proxy and pip's
    PIP_CERT; any network or TLS error counts as unreachable)."""
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout, context=context) as response:
            return response.status == 200
    except (OSError, ValueError):  # URLError, timeouts, refused connections and bad certificates are OSErrors
        return False


def stale_install(root: Path = ROOT) -> bool:
    """Whether this environment holds an editable install of this checkout under the package's old name, `recast`
    (the name of an unrelated package on the public index; the distribution is `recast-credit` now)."""
    import importlib.metadata
    import json
    import sysconfig

    # only the environment's own site-packages: a `recast.egg-info` left in the working directory by an old build
    # is on sys.path when Python runs from the checkout, and is no install
    site = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    for dist in importlib.metadata.distributions(name="recast", path=site):
        try:
            if json.loads(dist.read_text("direct_url.json") or "{}").get("url") == root.resolve().as_uri():
                return True
        except ValueError:
            continue
    return False


def plan(python: str, *, variant: str = "cpu", system: str = "Linux", reachable: bool = True,
         pin: str = "torch==2.13.0", index: str = CPU_INDEX, extra: str = "dev",
         stale: bool = False, installed: str | None = None) -> list[list[str]]:
    """The pip commands that install torch and then the package, in order.

    Args:
        python: the interpreter whose environment receives the install.
        variant: "cpu" or "cuda".
        system: `platform.system()` of the machine; only Linux needs the CPU index.
        reachable: whether the CPU index answered (`index_reachable`); ignored where it is not needed.
        pin: the ``torch==X.Y.Z`` requirement (`torch_pin`).
        index: the CPU index URL.
        extra: the package's extra to install.
        stale: remove this checkout's install under the old name first (`stale_install`).
        installed: the torch version installed now (`installed_torch`), None if none.

    Raises:
        ValueError: an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"--torch must be one of {', '.join(VARIANTS)}, got {variant!r}")
    pip = [python, "-m", "pip", "install", "--quiet"]
    steps = [pip + ["--upgrade", "pip"]]
    if variant == "cuda":
        if installed and "+cpu" in installed:  # it satisfies the pin (2.13.0+cpu is a 2.13.0), so it goes first
            steps.append([python, "-m", "pip", "uninstall", "--yes", "--quiet", "torch"])
        steps.append(fallback(python, pin))
    elif system == "Linux" and reachable:
        # the +cpu wheel (its few dependencies are on that index too); --upgrade replaces an installed CUDA build of
        # the same version, because 2.13.0+cpu sorts above 2.13.0, and leaves a CPU build as it is
        steps.append(pip + ["--upgrade", "--index-url", index, pin])
    else:
        steps.append(fallback(python, pin))
    if stale:
        steps.append([python, "-m", "pip", "uninstall", "--yes", "--quiet", "recast"])
    # torch is installed by now, so the package's own `torch>=...` is satisfied and pip leaves it alone
    return steps + [pip + ["-c", CONSTRAINTS, "-e", f".[{extra}]"]]


def fallback(python: str, pin: str) -> list[str]:
    """The torch install that leaves the choice of wheel to pip's own configuration."""
    return [python, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, pin]


def git_checkout(root: Path = ROOT) -> bool:
    """Whether ``root`` is the top of a git work tree (and git is on the path): where the notebooks' filter goes."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == Path(root).resolve()


def git_filter_plan(python: str) -> list[list[str]]:
    """The commands that make nbstripout this clone's git filter for notebooks, run in the clone.

    `nbstripout --install` writes the filter into .git/config (``required``, so a commit fails rather than keep
    outputs when the filter cannot run) and finds the committed .gitattributes already naming it; the filter is then
    given two options: ``--keep-id`` (nbstripout would otherwise renumber the cell ids, so every committed notebook
    would read as modified) and the kernel's ``language_info`` (its version, which JupyterLab writes on save) dropped.
    """
    strip = f'"{python}" -m nbstripout --keep-id --extra-keys metadata.language_info'
    return [[python, "-m", "nbstripout", "--install", "--attributes", ".gitattributes"],
            ["git", "config", "filter.nbstripout.clean", strip],
            ["git", "config", "diff.ipynb.textconv", strip + " -t"]]


def install_git_filter(python: str, root: Path = ROOT, dry_run: bool = False) -> bool:
    """Set up the notebooks' git filter (`git_filter_plan`) when ``root`` is a git checkout and ``python`` has
    nbstripout; otherwise, or when a step fails, say so and leave git as it is. Returns whether it is set up."""
    if not git_checkout(root):
        print("note: not a git checkout; the notebooks' git filter (nbstripout) is not set up", file=sys.stderr)
        return False
    if not dry_run and subprocess.run([python, "-m", "nbstripout", "--version"], cwd=root,
                                      capture_output=True).returncode:
        print("note: nbstripout is not installed (the dev extra has it); notebooks are committed as saved",
              file=sys.stderr)
        return False
    for cmd in git_filter_plan(python):
        print("$ " + " ".join(cmd), flush=True)
        if not dry_run and subprocess.run(cmd, cwd=root).returncode:
            print(f"note: `{' '.join(cmd)}` failed; the notebooks' git filter is not set up", file=sys.stderr)
            return False
    return True


def installed_torch() -> str | None:
    """The version of torch installed in this environment (``2.13.0+cpu`` for a CPU build), None if none."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch", default="cpu", choices=VARIANTS, help="which build of torch (default: cpu)")
    p.add_argument("--extra", default="dev", help="the package's extra to install (default: dev, what CI runs)")
    p.add_argument("--dry-run", action="store_true", help="print the pip commands; run nothing")
    a = p.parse_args(argv)
    index = os.environ.get("RECAST_CPU_INDEX", CPU_INDEX)
    system = platform.system()
    needs_index = a.torch == "cpu" and system == "Linux"
    reachable = index_reachable(index) if needs_index else False
    steps = plan(sys.executable, variant=a.torch, system=system, reachable=reachable, pin=torch_pin(), index=index,
                 extra=a.extra, stale=stale_install(), installed=installed_torch())
    if needs_index and not reachable:
        print(f"note: {index} is not reachable; torch comes from pip's own configuration. Where that is the public "
              f"index, Linux gets the CUDA build: `{sys.executable} scripts/install.py` again once the CPU index "
              "answers replaces it with the CPU one.", file=sys.stderr)
    for cmd in steps:
        print("$ " + " ".join(cmd), flush=True)
        if a.dry_run:
            continue
        code = subprocess.run(cmd, cwd=ROOT).returncode
        if code and "--index-url" in cmd:  # the CPU index answered but could not serve the pin: pip's own choice
            print(f"note: {index} could not install {cmd[-1]}; trying pip's own configuration", file=sys.stderr)
            cmd = fallback(sys.executable, cmd[-1])
            print("$ " + " ".join(cmd), flush=True)
            code = subprocess.run(cmd, cwd=ROOT).returncode
        if code:
            print(f"error: `{' '.join(cmd)}` failed (exit {code})", file=sys.stderr)
            return code
    install_git_filter(sys.executable, ROOT, dry_run=a.dry_run)
    if a.torch == "cpu" and not a.dry_run:
        print(f"installed the CPU build of torch; on a GPU box, `{GPU_HINT}` installs the CUDA build instead")
    return 0


if __name__ == "__main__":
    sys.exit(main())

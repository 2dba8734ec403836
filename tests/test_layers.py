"""The package's architecture, checked on the source: three rules over every import, at module level or inside a
function.

1. Nothing outside `recast.experiments` imports it or the command line (`recast.cli`, `recast.__main__`): the
   library never depends on a driver.
2. `recast.informativeness` does not import `recast.trainer`: the method's estimators stand without the trainer.
3. No import circles.

An edge ``A -> B`` is drawn for every module B that A names: ``from B import x`` names B (and B.x when that is a
module), ``import B.c as d`` names B.c. This counts ``from pkg import sub`` as an edge to the package, whose
``__init__`` runs first, so a submodule that does so while the package imports it back is a circle.
"""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = ("recast.experiments", "recast.cli", "recast.__main__")


def module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package_root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same top-level package it imports (absolute and relative imports)."""
    files = {module_name(p, package_root): p for p in package_root.rglob("*.py")}
    top = package_root.name
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    head = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(head + ([base] if base else []))
                named.add(base)
                named |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files}
        graph[mod] = {m for m in named if m in files and m != mod and m.split(".")[0] == top}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        scc.append(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        found.append(sorted(scc))
    return found


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, named in sorted(graph.items()):
        for dep in sorted(named):
            if dep.startswith(DRIVERS) and not mod.startswith(DRIVERS):
                bad.append(f"{mod} -> {dep} (only drivers import drivers)")
            if mod.startswith("recast.informativeness") and dep.startswith("recast.trainer"):
                bad.append(f"{mod} -> {dep} (informativeness must not import the trainer)")
    return bad


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT / "recast")


def test_the_package_keeps_its_layers(graph):
    assert graph["recast.experiments.demo"], "the graph saw no imports at all"
    assert layer_violations(graph) == []


def test_the_package_has_no_import_circles(graph):
    assert circles(graph) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "recast"


def test_the_checks_catch_what_they_forbid(tmp_path):
    root = _tree(tmp_path, {
        "recast/__init__.py": "",
        "recast/cli.py": "",
        "recast/experiments/__init__.py": "",
        "recast/experiments/demo.py": "from recast import cli\n",
        "recast/informativeness/__init__.py": "from .probe import x\n",
        "recast/informativeness/probe.py": "def f():\n    from recast.trainer.loop import train\n",
        "recast/trainer/__init__.py": "from recast.trainer.loop import train\n",
        "recast/trainer/loop.py": "from recast.trainer import checkpoint\n",
        "recast/trainer/checkpoint.py": "import recast.experiments.demo as d\n",
        "recast/solver.py": "import torch\n",
    })
    g = import_graph(root)
    assert g["recast.informativeness"] == {"recast.informativeness.probe"}  # the relative import is resolved
    assert g["recast.trainer.loop"] == {"recast.trainer", "recast.trainer.checkpoint"}
    assert g["recast.solver"] == set()  # other packages are not in the graph
    assert circles(g) == [["recast.trainer", "recast.trainer.loop"]]  # via `from recast.trainer import checkpoint`
    assert layer_violations(g) == [
        "recast.informativeness.probe -> recast.trainer.loop (informativeness must not import the trainer)",
        "recast.trainer.checkpoint -> recast.experiments.demo (only drivers import drivers)",
    ]


def test_a_submodule_imported_by_its_full_name_is_no_circle(tmp_path):
    root = _tree(tmp_path, {
        "recast/__init__.py": "",
        "recast/trainer/__init__.py": "from recast.trainer.loop import train\n",
        "recast/trainer/loop.py": "import recast.trainer.checkpoint as ckpt\n",
        "recast/trainer/checkpoint.py": "",
    })
    assert circles(import_graph(root)) == []


def test_every_module_outside_the_worlds_imports_without_diffusers():
    """The trainer, the credit package, the offline solver and the CLI import on a machine with no diffusers: only a
    world that wraps a diffusers pipeline may need it (imported lazily, when that world is chosen)."""
    code = textwrap.dedent("""
        import importlib, importlib.abc, pkgutil, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "diffusers":
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import recast
        bad, seen = [], 0
        for m in pkgutil.walk_packages(recast.__path__, "recast."):
            if ".worlds." in m.name or m.name.endswith("__main__"):
                continue
            seen += 1
            try:
                importlib.import_module(m.name)
            except ImportError as e:
                bad.append((m.name, str(e)[:80]))
        assert not [k for k in sys.modules if k.split(".")[0] == "diffusers"]
        print(seen, bad)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    seen, bad = out.stdout.split(" ", 1)
    assert int(seen) > 30 and bad.strip() == "[]", out.stdout

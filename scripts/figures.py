"""Regenerate the committed figures/ (and the tables their notebooks write) with the parameters they were made with.

    make figures                          # every recipe below, in order (hours on 2 cores: see TIME)
    make figures FIGURES="01 03"          # some of them
    python scripts/figures.py --list      # the recipes and their commands, nothing run
    python scripts/figures.py --stale     # the recipes whose drawing code changed since their figures were made

Runs execute under runs/ (never in tracked files); only the figures land in figures/ and the tables in
research/tables/, because this script sets RECAST_FIGURES_DIR and RECAST_RESULTS_DIR for its children. Notebooks
that train (03-06, 08) skip runs that already finished under runs/, so an interrupted `make figures` resumes.

Each recipe that finishes records in figures/provenance.json a SHA-256 of the code that draws its figures (the code
cells of its notebooks, or the demo's module, and `recast/plotting.py`) and the commit it ran on. A figure whose code
has changed since is stale: `--stale` lists it, and `tests/test_figures.py` fails unless it is regenerated or
listed, with its reason, under "Figures older than their code" in figures/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ("-p world data/digit_base -y 'settings: [compose, quality]' -y 'budgets: []' "
         "-y 'methods: [recast, uniform, reward_sum]' -y 'seeds: [0, 1, 2]' -p preset cpu -p iterations 0 "
         "-p eval_every 5 -p eval_prompts 64 -p jobs 2 -p out_root runs/sweep")

# name -> (commands run from the repo root, in order; the figures they write)
RECIPES: dict[str, tuple[tuple[str, ...], str]] = {
    "00": (("papermill notebooks/00_pretrain_base.ipynb runs/figures/00.ipynb",), "00_pretrain_base"),
    "01": (("papermill notebooks/01_weight_solver.ipynb runs/figures/01.ipynb",), "01_weight_solver"),
    "02": (("python research/probes/timing_cache.py record --seed 0 --substeps 16 --dir runs/ends_s16_x16",
            "python research/probes/timing_cache.py record --seed 1 --substeps 16 --dir runs/ends_s16_x16",
            "papermill notebooks/02_informativeness.ipynb runs/figures/02.ipynb -p num_prompts 256 -p num_rollouts 8 "
            "-p substeps 16 -p bootstrap 200 -p num_threads 2 -p ends_dir runs/ends_s16_x16 "
            "-p out_dir runs/02_informativeness_256_s16"), "02_informativeness"),
    "03": (("papermill notebooks/03_train.ipynb runs/figures/03.ipynb -p preset cpu -p method recast -p iterations 30 "
            "-p out_dir runs/figures/03_train",), "03_train"),
    "demo": (("python -m recast demo --setting compose --methods recast,static,uniform,reward_sum --seeds 0,1,2,3,4 "
              "--out runs/demo5_compose",
              "python -m recast demo --setting quality --methods recast,static,uniform,reward_sum --seeds 0,1,2,3,4 "
              "--out runs/demo5_quality",
              "python -m recast demo --setting timing --methods recast,static --seeds 0,1,2 --out runs/demo_timing"),
             "demo_compose, demo_quality, demo_timing"),
    "04": (("papermill notebooks/04_w_heatmaps.ipynb runs/figures/04.ipynb --cwd . -p profile "
            "data/profiles/digit_base_renderings_T6.npz -y 'budgets: [[1, 1, 1, 1, 1], [2, 1, 1, 1, 1], [1, 1, 1, 1, 2]]' "
            "-p run_dir runs/figures/04_live -p preset reading -p iterations 30",),
           "04_w_heatmaps (the paper's W per budget), 04_w_heatmaps_live (our live W)"),
    "05": ((f"papermill notebooks/05_lambda_sweep.ipynb runs/figures/05.ipynb {SWEEP} -p results_name lambda_sweep "
            "-p figure_name 05_lambda_sweep -p null_seeds 100",), "05_lambda_sweep_*"),
    "06": ((f"papermill notebooks/06_judge_eval.ipynb runs/figures/06.ipynb {SWEEP} -p num_prompts 64 "
            "-p per_seed_draws True -p results_name judge_eval -p figure_name 06_judge_eval",
            f"papermill notebooks/06_judge_eval.ipynb runs/figures/06_256.ipynb {SWEEP} -p num_prompts 256 "
            "-p per_seed_draws True -p results_name judge_eval_256 -p figure_name 06_judge_eval_256",
            f"papermill notebooks/06_judge_eval.ipynb runs/figures/06_1024.ipynb {SWEEP} -p num_prompts 256 -p draws 4 "
            "-p per_seed_draws True -p results_name judge_eval_1024 -p figure_name 06_judge_eval_1024"),
           "06_judge_eval_* (after 05: it reuses the sweep's runs)"),
    "08": (("papermill notebooks/08_replay.ipynb runs/figures/08.ipynb -p world data/digit_base "
            "-y 'settings: [compose, quality]' -y 'methods: [uniform, recast]' -y 'seeds: [0, 1, 2]' -p preset cpu "
            "-p iterations 0 -p eval_every 5 -p eval_prompts 64 -p jobs 2 -p out_root runs/replay "
            "-p results_name replay -p figure_name 08_replay",), "08_replay_*"),
}
# measured on 2 cores (research/rounds give each); the order above runs prerequisites first
TIME = {"00": "1 min", "01": "20 s", "02": "80 min recording + 5 min", "03": "3 min", "demo": "25 min", "04": "3 min",
        "05": "77 min", "06": "40 min", "08": "80 min"}


PROVENANCE = ROOT / "figures" / "provenance.json"


def drawing_sources(name: str) -> list[Path]:
    """The files whose code draws recipe ``name``'s figures: its notebooks (or the demo's module) and the plotting
    module they all draw with."""
    paths = [ROOT / p for cmd in RECIPES[name][0] for p in re.findall(r"notebooks/\S+\.ipynb", cmd)]
    if any(" -m recast demo " in f" {cmd} " for cmd in RECIPES[name][0]):
        paths.append(ROOT / "recast" / "experiments" / "demo.py")
    return [*dict.fromkeys(paths), ROOT / "recast" / "plotting.py"]


def drawing_code(name: str) -> str:
    """SHA-256 over the code of `drawing_sources` (a notebook's code cells only: its text and outputs do not draw)."""
    h = hashlib.sha256()
    for path in drawing_sources(name):
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text())["cells"]
            text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        else:
            text = path.read_text()
        h.update(f"{path.relative_to(ROOT)}\n{text}\n".encode())
    return h.hexdigest()


def stale(provenance: dict | None = None) -> list[str]:
    """The recipes whose figures were made by other code than today's (or whose making was never recorded)."""
    if provenance is None:
        provenance = json.loads(PROVENANCE.read_text()) if PROVENANCE.is_file() else {}
    return [n for n in RECIPES if provenance.get(n, {}).get("code") != drawing_code(n)]


def _record(name: str) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *map(str, drawing_sources(name))], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    provenance = json.loads(PROVENANCE.read_text()) if PROVENANCE.is_file() else {}
    provenance[name] = {"code": drawing_code(name), "commit": head + (" (with uncommitted changes)" if dirty else "")}
    from recast.io import write_json

    write_json(PROVENANCE, dict(sorted(provenance.items())))


def commands(names: list[str]) -> list[str]:
    """The shell commands of the named recipes, in recipe order.

    Raises:
        ValueError: an unknown recipe name.
    """
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise ValueError(f"unknown figure recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    return [c for n in RECIPES if n in names for c in RECIPES[n][0]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"recipes to run (default: all): {' '.join(RECIPES)}")
    p.add_argument("--list", action="store_true", help="print the recipes and their commands; run nothing")
    p.add_argument("--stale", action="store_true", help="print the recipes whose drawing code changed since their "
                                                          "figures were made; run nothing")
    a = p.parse_args(argv)
    try:
        todo = commands(a.names or list(RECIPES))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.stale:
        for name in stale():
            print(f"{name}: {RECIPES[name][1]} (drawing code changed since made; make figures FIGURES={name})")
        return 0
    if a.list:
        for name, (cmds, figs) in RECIPES.items():
            print(f"{name}: {figs} (about {TIME[name]})")
            print("".join(f"    {c}\n" for c in cmds), end="")
        return 0
    env = dict(os.environ, RECAST_FIGURES_DIR=str(ROOT / "figures"), RECAST_RESULTS_DIR=str(ROOT / "research" / "tables"))
    (ROOT / "runs" / "figures").mkdir(parents=True, exist_ok=True)
    bindir = Path(sys.executable).parent
    for name in [n for n in RECIPES if n in (a.names or list(RECIPES))]:
        for cmd in RECIPES[name][0]:
            argv0, *rest = shlex.split(cmd)
            exe = str(bindir / argv0) if (bindir / argv0).exists() else argv0
            print(f"$ {cmd}", flush=True)
            subprocess.run([exe, *rest], cwd=ROOT, env=env, check=True)
        _record(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

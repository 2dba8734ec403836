"""The paper's λ-sweep: settings × budgets × methods × seeds, every run a CLI command, resumable.

    runs = plan_sweep(settings=("compose",), methods=("recast", "static", "uniform"), seeds=(0, 1, 2))
    report = run_sweep(runs, jobs=2)            # skips runs that already finished; resumes killed ones

Aggregating the finished runs (rows, paired differences, efficiency, W timing) is `recast.experiments.sweep_results`.

The budget grid is written down once, in `budget_grid`: uniform, plus one budget per reward that puts `EMPHASIS` on
it and shares the rest equally (0.55 / 0.15 / 0.15 / 0.15 for four rewards). Each run is exactly the command in its
row (`SweepRun.command`), with `num_threads=1` pinned so that rerunning it reproduces the row bit for bit.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["EMPHASIS", "results_dir", "budget_grid", "lambda_grid", "SweepRun", "SweepReport", "plan_sweep", "is_finished",
           "run_sweep"]

EMPHASIS: float = 0.55  # the budget a reward-emphasising λ puts on its reward; the others share the rest equally


def results_dir() -> Path:
    """Where result tables go: $RECAST_RESULTS_DIR if set, else ``runs/results`` under the working directory
    (``runs/results/<run name>`` for a notebook run with parameters, `recast.nbparams.typed_parameters`).

    Nothing lands in tracked files by default; the committed research tables are regenerated on purpose with
    ``RECAST_RESULTS_DIR=research/tables`` (each page of ``research/`` gives its command).
    """
    env = os.environ.get("RECAST_RESULTS_DIR")
    run = os.environ.get("RECAST_RUN_NAME", "").strip()  # a notebook run's own folder (`recast.nbparams`)
    return Path(env) if env else Path.cwd() / "runs" / "results" / (run if run and run != "default" else "")


def budget_grid(reward_names: tuple[str, ...] | list[str]) -> dict[str, tuple[float, ...]]:
    """The K + 1 budgets of one setting: "uniform" and "<reward>-heavy" for each reward (`EMPHASIS` on it).

    Raises:
        ValueError: fewer than two rewards, or duplicate names.
    """
    names = tuple(reward_names)
    K = len(names)
    if K < 2 or len(set(names)) != K:
        raise ValueError(f"a budget grid needs at least two distinct rewards, got {names}")
    grid = {"uniform": tuple(1.0 / K for _ in names)}
    for k, name in enumerate(names):
        grid[f"{name}-heavy"] = tuple(EMPHASIS if j == k else (1.0 - EMPHASIS) / (K - 1) for j in range(K))
    return grid


def lambda_grid(world: str, setting: str) -> dict[str, tuple[float, ...]]:
    """`budget_grid` of a world's named reward setting (reads the world's static description, loads nothing)."""
    from recast.config import resolve_world
    from recast.world import world_info

    info = world_info(resolve_world(world))
    if setting not in info.reward_settings:
        raise ValueError(f"unknown setting {setting!r} for world {world!r}; choose one of "
                         f"{sorted(info.reward_settings)}")
    return budget_grid(info.reward_settings[setting])


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep.

    Attributes:
        setting, budget, method, seed: the cell and the seed.
        lam: the budget's λ.
        out_dir: the run directory.
        args: the arguments of `python -m recast train` that make it (without --resume / --overwrite).
    """

    setting: str
    budget: str
    lam: tuple[float, ...]
    method: str
    seed: int
    out_dir: Path
    args: tuple[str, ...]

    @property
    def command(self) -> str:
        """The shell command that regenerates this run."""
        return shlex.join(["python", "-m", "recast", "train", *self.args])


def plan_sweep(*, world: str = "data/digit_base", settings: tuple[str, ...] = ("compose", "quality"),
               budgets: tuple[str, ...] = (), methods: tuple[str, ...] = ("recast", "static"),
               seeds: tuple[int, ...] = (0, 1, 2), preset: str = "cpu", iterations: int | None = None,
               sets: dict[str, object] | None = None, out_root: str | os.PathLike = "runs/sweep",
               config: str | None = None) -> list[SweepRun]:
    """Every run of a sweep, in a fixed order, each at the same sample budget (the preset's, or `iterations`).

    Args:
        world: world spec (all runs share it).
        settings: reward settings of the world.
        budgets: budget names to keep (() = all of `lambda_grid`).
        methods, seeds: every method runs every seed.
        preset: `recast.config.preset` name.
        iterations: override of the preset's iterations.
        sets: extra `--set FIELD=VALUE` overrides shared by every run. A ``rewards`` entry (comma-separated names, or
            a sequence) replaces the setting's rewards, and the budget grid is built over that list instead.
        out_root: runs go to ``out_root/<setting>/<budget>/<method>/seed_<s>``.
        config: config files (``--config a.yaml,b.yaml``) every run layers over the preset; a ``rewards`` list in
            them replaces the setting's rewards for the budget grid, as ``sets`` does.

    Raises:
        ValueError: an unknown setting or budget name, an unknown method, no seeds, or duplicate seeds.
    """
    from recast.config import METHODS, preset as make_preset

    make_preset(preset)  # unknown preset -> ValueError before anything is planned
    bad = sorted(set(methods) - set(METHODS))
    if bad or not methods:
        raise ValueError(f"unknown methods {bad or methods}; choose from {METHODS}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and non-empty, got {seeds}")
    extra = {"num_threads": 1, **(sets or {})}
    runs = []
    rewards = extra.get("rewards")
    if config and rewards is None:
        from recast.configfile import load_config_files

        rewards = load_config_files(config).get("rewards") or None
    if rewards is not None and not isinstance(rewards, str):
        rewards = ",".join(rewards)
        if "rewards" in extra:
            extra["rewards"] = rewards
    for setting in settings:
        grid = lambda_grid(world, setting)  # also checks the setting's name
        if rewards:
            grid = budget_grid(rewards.split(","))
        unknown = sorted(set(budgets) - set(grid))
        if unknown:
            raise ValueError(f"unknown budgets {unknown} for setting {setting!r}; choose from {sorted(grid)}")
        for budget, lam in grid.items():
            if budgets and budget not in budgets:
                continue
            for method in methods:
                for seed in seeds:
                    out = Path(out_root) / setting / budget / method / f"seed_{seed}"
                    args = ["--preset", preset, *(["--config", str(config)] if config else []), "--world", world,
                            "--setting", setting, "--method", method, "--lam", ",".join(f"{x:g}" for x in lam),
                            "--seed", str(seed), "--out", str(out)]
                    if iterations is not None:
                        args += ["--iterations", str(iterations)]
                    for k, v in extra.items():  # mappings and lists as JSON, which --set parses as YAML
                        args += ["--set", f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}"]
                    runs.append(SweepRun(setting, budget, lam, method, seed, out, tuple(args)))
    return runs


def _planned_config(run: SweepRun):
    """The TrainConfig the run's command asks for (parsed exactly as `python -m recast train` parses it)."""
    from recast.runargs import config_from_args, train_parser

    return config_from_args(train_parser().parse_args(list(run.args)))


def is_finished(run: SweepRun) -> bool:
    """True when the run's last iteration and its final evaluation are on disk, made with the settings its command
    asks for now (a run made with other settings is not this plan's, whatever it holds)."""
    from recast.trainer.checkpoint import RESOLVED_FIELDS, check_resume_config
    from recast.trainer.rundir import is_finished as finished
    from recast.trainer.runfiles import read_run_config

    try:
        saved = read_run_config(run.out_dir)  # a hand-edited field of the wrong type: not finished (train names it)
        if not getattr(run, "args", None):  # a run directory without a command (a demo's): its own config decides
            return finished(run.out_dir, saved.get("iterations", -1))
        cfg = _planned_config(run)
        check_resume_config(run.out_dir, cfg.to_dict(), resolved=RESOLVED_FIELDS)
    except (FileNotFoundError, ValueError, OSError, SystemExit):
        return False
    return finished(run.out_dir, cfg.iterations)


@dataclass(frozen=True)
class SweepReport:
    """What `run_sweep` did: runs trained, skipped (already finished, or finished by another sweep while this one
    waited), busy (held by another live run) and failed (with their stderr tails)."""

    ran: list[SweepRun] = field(default_factory=list)
    skipped: list[SweepRun] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    wall_time_s: float = 0.0
    busy: list[SweepRun] = field(default_factory=list)


_CHILDREN: set = set()
_CHILDREN_LOCK = threading.Lock()


def _launch(run: SweepRun, python: str, rerun_changed: bool) -> tuple[SweepRun, int, str]:
    """Run one training command with ``--auto``: the child decides under the run directory's lock whether to
    continue, skip (finished) or start, so two sweeps on one root never retrain or clear each other's runs. A run
    made with other settings is refused (exit 2) unless ``rerun_changed`` adds ``--overwrite``."""
    extra = ["--auto", *(["--overwrite"] if rerun_changed else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([python, "-m", "recast", "train", *run.args, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    with _CHILDREN_LOCK:
        _CHILDREN.add(proc)
    try:
        out, err = proc.communicate()
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.discard(proc)
    return run, proc.returncode, (err or "")[-2000:] + ("\n__finished__" if "already holds this run" in out else "")


def _stop_children(signum, frame):
    """Forward a SIGTERM / SIGINT to every training child (each stops at its own pace, its checkpoint intact), then
    let the driver stop: no child outlives its sweep."""
    with _CHILDREN_LOCK:
        for proc in list(_CHILDREN):
            if proc.poll() is None:
                proc.send_signal(signum)
    raise KeyboardInterrupt(f"sweep interrupted by signal {signum}; rerun it to continue")


def _planned_iterations(run: SweepRun) -> int | str:
    try:
        return _planned_config(run).iterations
    except (ValueError, OSError, SystemExit):
        return "?"


def run_sweep(runs: list[SweepRun], *, jobs: int = 1, python: str = sys.executable,
              rerun_changed: bool = False, progress: bool = True) -> SweepReport:
    """Train every unfinished run, `jobs` at a time, each as its own `python -m recast train --auto` process.

    Rerunning a sweep continues it: finished runs are skipped, killed ones resume from their checkpoints. A run
    whose directory holds a run made with other settings is refused and reported in `failed`, unless
    ``rerun_changed`` (then it is trained afresh). A run that fails does not stop the others. SIGTERM or SIGINT to
    the driver is forwarded to its children. With ``progress``, one line per finished iteration of every run goes
    to stderr (``[sweep] compose/uniform/recast/seed_0: iteration 12/30 (6.8 s/iteration)``), which papermill's
    log and a notebook show as they come.
    """
    from contextlib import nullcontext

    from recast.experiments.progress import RunProgress
    from recast.trainer.rundir import EXIT_BUSY as BUSY

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    start = time.perf_counter()
    todo = [r for r in runs if not is_finished(r)]
    skipped = [r for r in runs if r not in todo]
    ran, failed, busy = [], {}, []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _stop_children) for s in (signal.SIGTERM, signal.SIGINT)}
    labels = {f"{r.setting}/{r.budget}/{r.method}/seed_{r.seed}": r.out_dir for r in todo}
    totals = {label: _planned_iterations(r) for label, r in zip(labels, todo)}
    watch = RunProgress(labels, totals, prefix="[sweep]") if progress and todo else nullcontext()
    try:
        with watch, cf.ThreadPoolExecutor(max_workers=jobs) as pool:
            for run, code, err in pool.map(lambda r: _launch(r, python, rerun_changed), todo):
                if code == 0:
                    (skipped if err.endswith("__finished__") else ran).append(run)
                elif code == BUSY:
                    busy.append(run)
                else:
                    failed[str(run.out_dir)] = err
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    return SweepReport(ran, skipped, failed, time.perf_counter() - start, busy)

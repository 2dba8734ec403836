"""Trajectory replay measured at equal reward queries: settings × {uniform, recast_live} × {no replay, replay} × seeds.

(Replay re-normalises each stored reward against the current batch, so it runs with the per_reward aggregation:
uniform and our live reading, recast_live; the round that used it called the live method "recast".)

    runs = plan_replay(settings=("compose", "quality"), methods=("uniform", "recast_live"), seeds=(0, 1, 2))
    sweep.run_sweep(runs, jobs=2)             # the λ-sweep's runner: skips finished runs, resumes killed ones
    rows = collect(runs)                       # sweep_results.collect + reward queries and training seconds per run
    cells = compare_replay(rows, methods)      # paired replay − no-replay differences with 95 % intervals
    qc = query_curves(runs)                    # every evaluation against the cumulative reward queries
    eff = efficiency(qc, "judge/strict", methods)   # reward queries replay needs to reach no-replay's final score
    flags = reward_judge_check(cells)          # does replay buy training reward at the judges' expense?

Everything reuses the λ-sweep's machinery (`recast.experiments.sweep`, `recast.stats`): a replay arm is a `SweepRun` whose
method label is ``<method>+replay`` and whose command adds ``--set replay_share=...``. Both arms of a method draw the
same fresh batch per iteration (replay has its own generator, and replayed samples are never scored), so at every
iteration they have made the same number of reward queries; the curves' x axis is read from `reward_queries` in each
run's metrics.jsonl rather than assumed. The replay arm does more gradient work per iteration: `collect` reports each
run's training seconds so that the cost is on the table too.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from recast.experiments import sweep, sweep_results
from recast.experiments.sweep import SweepRun

__all__ = ["SUFFIX", "arm", "plan_replay", "collect", "compare_replay", "query_curves", "efficiency",
           "reward_judge_check"]

SUFFIX = "+replay"  # method label of a replay arm: "recast_live+replay"


def arm(method: str, replay: bool) -> str:
    """The arm label of a method with or without replay."""
    return method + SUFFIX if replay else method


def _with_out(args: tuple[str, ...], out: Path) -> list[str]:
    args = list(args)
    args[args.index("--out") + 1] = str(out)
    return args


def plan_replay(*, world: str = "data/digit_base", settings: tuple[str, ...] = ("compose", "quality"),
                methods: tuple[str, ...] = ("uniform", "recast_live"), seeds: tuple[int, ...] = (0, 1, 2),
                preset: str = "cpu", iterations: int | None = None, replay_share: float = 1.0,
                replay_capacity: int = 256, replay_max_age: int = 8, priorities: dict[str, str] | None = None,
                sets: dict[str, object] | None = None, out_root: str | os.PathLike = "runs/replay") -> list[SweepRun]:
    """Every run of the replay comparison, no-replay arms first, at the uniform budget of each setting.

    Args:
        world, settings, methods, seeds, preset, iterations, sets: as `recast.experiments.sweep.plan_sweep`.
        replay_share, replay_capacity, replay_max_age: the replay arms' `TrainConfig` fields.
        priorities: method -> replay_priority (default: "informativeness" for recast_live, "advantage" otherwise).
        out_root: runs go to ``out_root/<setting>/uniform/<arm>/seed_<s>``.

    Raises:
        ValueError: anything `plan_sweep` refuses, a priority for a method not planned, or a replay config that
            `validate_config` refuses (checked for every replay run before any is trained).
    """
    from recast.runargs import config_from_args, train_parser
    from recast.trainer.validate import validate_config

    prio = {m: "informativeness" if m == "recast_live" else "advantage" for m in methods}
    extra = sorted(set(priorities or {}) - set(methods))
    if extra:
        raise ValueError(f"priorities given for methods not in the plan: {extra} (methods: {list(methods)})")
    prio.update(priorities or {})
    if not replay_share > 0:
        raise ValueError(f"replay_share must be > 0 for the replay arms, got {replay_share}")
    base = sweep.plan_sweep(world=world, settings=settings, budgets=("uniform",), methods=methods, seeds=seeds,
                            preset=preset, iterations=iterations, sets=sets, out_root=out_root)
    replayed = []
    for run in base:
        out = Path(out_root) / run.setting / run.budget / arm(run.method, True) / f"seed_{run.seed}"
        args = _with_out(run.args, out)
        for k, v in (("replay_share", replay_share), ("replay_capacity", replay_capacity),
                     ("replay_max_age", replay_max_age), ("replay_priority", prio[run.method])):
            args += ["--set", f"{k}={v}"]
        replayed.append(replace(run, method=arm(run.method, True), out_dir=out, args=tuple(args)))
        validate_config(config_from_args(train_parser().parse_args(list(args))))
    return base + replayed


def _queries(run_dir: Path) -> dict[int, int]:
    """iteration -> cumulative reward queries (fresh images scored) from a run's metrics.jsonl; 0 at iteration 0."""
    from recast.trainer.metrics import load_run

    r = load_run(run_dir)
    if any("reward_queries" not in m for m in r.metrics):
        raise ValueError(f"{run_dir}/metrics.jsonl has no reward_queries: the run predates reward-query logging; "
                         "rerun it")
    return {0: 0, **{int(m["iteration"]): int(m["reward_queries"]) for m in r.metrics}}


def collect(runs: list[SweepRun]) -> list[dict]:
    """`recast.experiments.sweep_results.collect` rows, each with the run's total reward queries, training seconds and replay share."""
    from recast.trainer.metrics import load_run

    rows = sweep_results.collect(runs)
    by = {(r.setting, r.budget, r.method, r.seed): r for r in runs}
    for row in rows:
        run = load_run(by[(row["setting"], row["budget"], row["method"], row["seed"])].out_dir)
        row["reward_queries"] = int(run.metrics[-1]["reward_queries"])
        row["train_s"] = float(sum(m.get("time/total", 0.0) for m in run.metrics))
        row["replay_share"] = float(run.config.get("replay_share", 0.0))
    return rows


def compare_replay(rows: list[dict], methods: tuple[str, ...] = ("uniform", "recast_live"),
                   confidence: float = 0.95) -> list[dict]:
    """Paired differences over seeds: each method with replay against itself without, and (when both ran)
    recast with replay against uniform without (the seed's whole recipe against the static baseline)."""
    pairs = [(arm(m, True), m) for m in methods]
    if "recast_live" in methods and "uniform" in methods:
        pairs.append((arm("recast_live", True), "uniform"))
    return [c for a, b in pairs for c in sweep_results.compare(rows, method=a, baseline=b, confidence=confidence)]


def query_curves(runs: list[SweepRun]) -> list[dict]:
    """`recast.experiments.sweep_results.curves` with ``images`` replaced by the cumulative reward queries at each evaluation (the
    x axis of every curve here), read from each run's metrics.jsonl; the column ``reward_queries`` holds it too."""
    by = {(r.setting, r.budget, r.method, r.seed): r for r in runs}
    cache: dict[Path, dict[int, int]] = {}
    out = []
    for row in sweep_results.curves(runs):
        d = by[(row["setting"], row["budget"], row["method"], row["seed"])].out_dir
        q = cache.setdefault(d, _queries(d))
        out.append({**row, "images": q[int(row["iteration"])], "reward_queries": q[int(row["iteration"])]})
    return out


def efficiency(curve_rows: list[dict], metric: str, methods: tuple[str, ...] = ("uniform", "recast_live")) -> list[dict]:
    """Per setting and method: the reward queries the replay arm needs to reach the no-replay arm's final seed-mean
    `metric`, as a ratio of the no-replay arm's queries (`recast.experiments.sweep_results.efficiency`; None: never reached), and its
    inverse, the sample-efficiency gain (the seed paper's "2–6×"); the gain is None where replay never gets there,
    or where the no-replay arm ends no better than its first evaluation (the target is then met at the start).

    Raises:
        ValueError: from `recast.stats` on malformed curves.
    """
    out = []
    for m in methods:
        # ratio is None both when replay never gets there and when the no-replay arm ended no better than it
        # started (its start already "reaches" its end): `baseline_improved` tells them apart
        for e in sweep_results.efficiency(curve_rows, metric, method=arm(m, True), baseline=m):
            ratio = e["ratio"]
            base = [r for r in curve_rows if (r["setting"], r["budget"], r["method"], r["metric"]) ==
                    (e["setting"], e["budget"], m, metric)]
            total, first = max(r["images"] for r in base), min(r["images"] for r in base)
            start = float(np.mean([r["value"] for r in base if r["images"] == first]))
            out.append({**e, "baseline_start": start, "queries_baseline": total,
                        "queries_needed": None if ratio is None else ratio * total,
                        "gain": 1.0 / ratio if ratio else None})
    return out


def reward_judge_check(cells: list[dict]) -> list[dict]:
    """Per compared pair and setting: the training rewards replay raises (paired win) and the held-out judges it
    lowers (paired loss); ``reward_up_judge_down`` is True when both lists are non-empty (reward bought at the
    judges' expense)."""
    out = []
    for key in sorted({(c["setting"], c["budget"], c["method"], c["baseline"]) for c in cells}, key=str):
        sel = [c for c in cells if (c["setting"], c["budget"], c["method"], c["baseline"]) == key]
        up = [c["metric"] for c in sel if c["metric"].startswith("reward/") and c["verdict"] == "win"]
        down = [c["metric"] for c in sel if c["metric"].startswith("judge/") and c["verdict"] == "loss"]
        weighted = next((c["diff"] for c in sel if c["metric"] == "reward/weighted"), None)
        out.append({"setting": key[0], "budget": key[1], "method": key[2], "baseline": key[3],
                    "reward/weighted diff": weighted, "rewards_up": ";".join(up), "judges_down": ";".join(down),
                    "reward_up_judge_down": bool(up and down)})
    return out

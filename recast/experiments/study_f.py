"""Stage F of the pre-registered study: the paper's own comparison in the digit world, resumable from committed records
(research/study/preregistration.md, "Amendment: stage F").

    python -m recast.experiments.study_f tables                 # the weight tables of every budget, from the profiles
    python -m recast.experiments.study_f run --jobs 2 --commit  # train what has no committed record, in priority order
    python -m recast.experiments.study_f collect                # the records -> research/study/data/F.csv
    python -m recast.experiments.study_f_analysis analyse       # the tables of the results page (and report, figures)

Every run is a `python -m recast train` command (the paper preset, dense evaluation as in stage A) under
``runs/study/F/<setting>/<budget>/<arm>/seed_<s>``. When a run finishes, its summary record (its command, config hash,
trainer commit, every evaluation, the signal spread per iteration, W, reward queries and times; a few KB) is written
to ``research/study/F/records/`` and, with ``--commit``, committed at once, so a fresh clone on another machine
continues where the last one stopped: `run` skips every run whose record is there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from recast.experiments.sweep import SweepRun, run_sweep

__all__ = ["ARMS", "SETTINGS", "SEEDS", "STAGE_DIR", "budgets", "plan", "make_tables", "record", "collect", "missing",
           "trainer_commits", "complete_arms"]

ROOT = Path(__file__).resolve().parents[2]
STAGE_DIR = ROOT / "research" / "study" / "F"
PROFILES = {"renderings": "data/profiles/digit_base_renderings_T6.npz", "self": "data/profiles/digit_base_self_T6.npz"}
SETTINGS = ("compose", "quality")
SEEDS = (0, 1, 2)
DENSE = ("--set", "eval_every=3", "--set", "eval_prompts=256")
# arm -> (method, extra arguments); the order is the pre-registered priority
ARMS = {
    "static": ("static", ()),
    "recast": ("recast", ("table", "renderings")),
    "recast_self": ("recast", ("table", "self")),
    "recast_live": ("recast_live", ("--aggregation", "pre", "--set", "kernel=exp")),
    "reading": ("recast_live", ("--aggregation", "per_reward", "--set", "kernel=power")),
}


def rewards(setting: str) -> tuple[str, ...]:
    """The digit world's rewards of a setting (its static description; nothing loads)."""
    from recast.world import world_info

    return tuple(world_info("tiny").reward_settings[setting])


def budgets(setting: str) -> dict[str, tuple[float, ...]]:
    """The paper's design: equal budgets, then each reward doubled in turn (K + 1 budgets)."""
    names = rewards(setting)
    out = {"equal": tuple(1.0 for _ in names)}
    for k, n in enumerate(names):
        out[f"{n}-x2"] = tuple(2.0 if i == k else 1.0 for i in range(len(names)))
    return out


def table_path(proposal: str, setting: str, budget: str) -> Path:
    return STAGE_DIR / "tables" / proposal / f"{setting}_{budget}.npz"


def make_tables() -> list[Path]:
    """Every (proposal, setting, budget)'s weight table from the committed profiles (milliseconds each)."""
    from recast.archives import load_profile, save_table, table_from_profile

    out = []
    for proposal, path in PROFILES.items():
        for setting in SETTINGS:
            prof = load_profile(ROOT / path, rewards(setting))
            for name, lam in budgets(setting).items():
                target = table_path(proposal, setting, name)
                save_table(table_from_profile(prof, list(lam), reward_names=rewards(setting)), target)
                out.append(target)
    return out


def plan(*, out_root="runs/study/F", arms=tuple(ARMS), world: str = "data/digit_base") -> list[SweepRun]:
    """Every stage-F run in training order: arm pairs by priority, then seed, setting and budget."""
    runs = []
    order = [("static", "recast"), ("recast_self",), ("recast_live",), ("reading",)]
    for group in order:
        for seed in SEEDS:
            for setting in SETTINGS:
                for name, lam in budgets(setting).items():
                    for arm in group:
                        if arm not in arms:
                            continue
                        method, extra = ARMS[arm]
                        if extra[:1] == ("table",):
                            extra = ("--weight-file", str(table_path(extra[1], setting, name).relative_to(ROOT)))
                        out = Path(out_root) / setting / name / arm / f"seed_{seed}"
                        args = ("--preset", "paper", "--world", world, "--setting", setting, "--method", method,
                                "--lam", ",".join(f"{x:g}" for x in lam), "--seed", str(seed), "--out", str(out),
                                "--set", "num_threads=1", *DENSE, *extra)
                        runs.append(SweepRun(setting, name, lam, arm, seed, out, args))
    return runs


RECORDS = STAGE_DIR / "records"


def record_path(run: SweepRun, records: Path = RECORDS) -> Path:
    return Path(records) / run.setting / run.budget / run.method / f"seed_{run.seed}.json"


def record(run: SweepRun, commit: str) -> dict:
    """A finished run's summary: everything the stage's tables read, and what identifies the run."""
    from recast.io import read_json
    from recast.trainer.metrics import load_run

    r = load_run(run.out_dir)
    cfg = read_json(Path(run.out_dir) / "config.json")
    plain = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("progress",)}
    return {"format": "recast-study-record/1", "stage": "F", "setting": run.setting, "budget": run.budget,
            "arm": run.method, "seed": run.seed, "lam": list(run.lam), "command": run.command, "trainer_commit": commit,
            "config_sha256": hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest(),
            "reward_names": list(r.reward_names), "images_per_iteration": int(cfg["prompts_per_iter"]) *
            int(cfg["group_size"]), "evals": r.evals, "W": r.metrics[-1].get("W"),
            "signal_sd": [m.get("signal/sd") for m in r.metrics],
            "reward_queries": r.metrics[-1].get("reward_queries"),
            "reward_queries_proxy": r.metrics[-1].get("reward_queries_proxy"),
            "train_s": float(sum(m.get("time/total", 0.0) for m in r.metrics))}


def _commit_records(paths: list[Path], message: str) -> None:
    """Commit exactly these files in the repository that holds them (pathspec-only, so nothing else staged in that
    checkout goes with them)."""
    top = subprocess.run(["git", "-C", str(Path(paths[0]).parent), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True).stdout.strip()
    rel = [str(Path(p).resolve().relative_to(top)) for p in paths]
    for attempt in range(10):
        add = subprocess.run(["git", "-C", top, "add", "--", *rel], capture_output=True, text=True)
        done = add.returncode == 0 and subprocess.run(["git", "-C", top, "commit", "-q", "-m", message, "--",
                                                       *rel], capture_output=True, text=True).returncode == 0
        if done:
            return
        time.sleep(3 + attempt)  # another git command holds the index lock
    print(f"warning: could not commit {len(rel)} records; they are written, commit them by hand", file=sys.stderr)


def trainer_commits(records: Path = RECORDS) -> set[str]:
    """The trainer commits the records under ``records`` name (the amendment trains every run on one)."""
    out = set()
    for p in Path(records).glob("*/*/*/seed_*.json"):
        commit = json.loads(p.read_text()).get("trainer_commit")
        if commit:
            out.add(commit)
    return out


def run(*, jobs: int = 2, arms=tuple(ARMS), chunk: int = 4, commit: bool = False, out_root="runs/study/F",
        records: Path = RECORDS, new_trainer: bool = False) -> int:
    """Train every planned run without a record, `chunk` at a time, recording (and committing) each as it lands.

    Refused (exit 2, before any compute) when this checkout's commit is not the one the records were trained on,
    unless ``new_trainer`` (a deviation the amendment asks to log first)."""
    from recast.io import write_json

    head = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "unknown"
    others = sorted(trainer_commits(records) - {head})
    if others and not new_trainer:
        where = Path(records).resolve()
        print(f"error: stage F's records were trained on {', '.join(c[:10] for c in others)}, this checkout is "
              f"{head[:10]}: every run of the stage trains on one trainer commit. Continue from that commit: `git "
              f"worktree add --detach ../studyF {others[0][:10]} && cd ../studyF && python -m "
              f"recast.experiments.study_f run --jobs 2 --commit --records {where}`; or log a deviation in "
              "research/study/preregistration.md and pass --new-trainer", file=sys.stderr)
        return 2
    todo = [r for r in plan(out_root=out_root, arms=arms) if not record_path(r, records).is_file()]
    print(f"stage F: {len(todo)} runs without a record (trainer commit {head[:10]})", flush=True)
    failed = 0
    for i in range(0, len(todo), chunk):
        batch = todo[i:i + chunk]
        rep = run_sweep(batch, jobs=jobs)
        failed += len(rep.failed)
        for k, v in rep.failed.items():
            print(f"FAILED {k}: {v.strip().splitlines()[-1] if v.strip() else ''}", file=sys.stderr, flush=True)
        written = []
        for r in batch:
            if str(r.out_dir) not in rep.failed and (Path(r.out_dir) / "eval.jsonl").is_file():
                written.append(write_json(record_path(r, records), record(r, head)))
        if commit and written:
            _commit_records(written, f"Study stage F: {len(written)} run records ({', '.join(sorted({f'{r.setting}/{r.method}' for r in batch}))})")
        print(f"{min(i + chunk, len(todo))}/{len(todo)} done, {rep.wall_time_s:.0f} s for this batch", flush=True)
    return 1 if failed else 0


def missing(arms=tuple(ARMS), records: Path = RECORDS) -> list[SweepRun]:
    """The planned runs of these arms that have no record yet."""
    return [r for r in plan(arms=arms) if not record_path(r, records).is_file()]


def complete_arms(records: Path = RECORDS) -> tuple[str, ...]:
    """The arms every planned run of which has a record: the only ones the analysis reads (the amendment reads
    nothing of an arm until its runs are in)."""
    return tuple(a for a in ARMS if not missing((a,), records))


def collect(records_dir: Path = RECORDS, arms=None) -> list[dict]:
    """Long rows (one per run × evaluation × metric, as A.csv) from the committed records, plus W and spread rows.

    Args:
        arms: only these arms' records (default: all). The CLI's `collect` takes the complete arms
            (`complete_arms`): data/F.csv holds what the analysis may read, and a record of an unfinished arm
            landing later leaves it as it is.
    """
    rows = []
    for p in sorted(records_dir.glob("*/*/*/seed_*.json")):
        rec = json.loads(p.read_text())
        if arms is not None and rec["arm"] not in arms:
            continue
        key = dict(stage="F", setting=rec["setting"], budget=rec["budget"], arm=rec["arm"], seed=rec["seed"])
        per = rec["images_per_iteration"]
        for ev in rec["evals"]:
            for metric, value in ev.items():
                if metric.startswith(("judge/", "reward/")) and isinstance(value, (int, float)):
                    rows.append(dict(key, iteration=ev["iteration"], images=ev["iteration"] * per, metric=metric,
                                     value=float(value)))
        last = rec["evals"][-1]["iteration"]
        sd = [s for s in rec["signal_sd"] if s is not None]
        rows.append(dict(key, iteration=last, images=0, metric="signal/sd_mean", value=float(sum(sd) / len(sd))))
        rows.append(dict(key, iteration=last, images=0, metric="time/train_s", value=rec["train_s"]))
        for name in ("reward_queries", "reward_queries_proxy"):
            if rec.get(name) is not None:
                rows.append(dict(key, iteration=last, images=0, metric=f"queries/{name}", value=float(rec[name])))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("tables", "run", "collect", "list"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=4, help="runs trained between two record commits")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms to train (priority order kept)")
    ap.add_argument("--commit", action="store_true", help="commit each batch's records as they land")
    ap.add_argument("--out-root", default="runs/study/F")
    ap.add_argument("--records", default=str(RECORDS), help="where the run records go (a training worktree writes "
                    "into the main checkout's research/study/F/records)")
    ap.add_argument("--new-trainer", action="store_true", help="train on a commit other than the records' (log the "
                    "deviation first)")
    a = ap.parse_args(argv)
    arms = tuple(x for x in a.arms.split(",") if x)
    bad = [x for x in arms if x not in ARMS]
    if bad:
        print(f"error: unknown arms {bad}; choose from {list(ARMS)}", file=sys.stderr)
        return 2
    if a.command == "tables":
        for p in make_tables():
            print(p.relative_to(ROOT))
        return 0
    if a.command == "list":
        for r in plan(out_root=a.out_root, arms=arms):
            print(("done  " if record_path(r, Path(a.records)).is_file() else "todo  ") + r.command)
        return 0
    if a.command == "run":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        return run(jobs=a.jobs, arms=arms, chunk=a.chunk, commit=a.commit, out_root=a.out_root,
                   records=Path(a.records), new_trainer=a.new_trainer)
    from recast.io import write_csv

    rows = collect(Path(a.records), arms=complete_arms(Path(a.records)))
    write_csv(ROOT / "research" / "study" / "data" / "F.csv", rows)
    print(f"{len(rows)} rows of {len({(r['setting'], r['budget'], r['arm'], r['seed']) for r in rows})} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
continues where the last one stopped: `run` skips every run whose record is there. After the five arms, `run` trains
the pre-registered kl_beta sensitivity check where the spreads make it due (`sensitivity_due`) and W's real-trainer
null for `recast_live` (addendum F.1).

Every run of the stage trains on one trainer commit (the records name it). The driver need not be that commit:
``run --trainer ../studyF`` trains in a worktree at the records' commit while this checkout writes and commits the
records (`git worktree add --detach ../studyF <commit>` makes one; `run` prints the command when it refuses).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from recast.experiments.sweep import SweepRun, run_sweep

__all__ = ["ARMS", "SETTINGS", "SEEDS", "STAGE_DIR", "KL_BETA", "SENSITIVITY", "NULL_SEEDS", "budgets", "plan",
           "sensitivity_plan", "sensitivity_due", "null_plan", "make_tables", "record", "collect", "missing",
           "trainer_commits", "complete_arms", "rel_departure", "check_trainer"]

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
# The pre-registered sensitivity check ("Scale, reported not assumed"): `recast` and `reading` again at twice the
# setting's kl_beta (the paper preset's: 1 compose, 2 quality), equal budget, seeds 0-2, in each setting where the two
# arms' mean signal spreads differ by more than SPREAD_RATIO. Trained after the five arms, only where due.
KL_BETA = {"compose": 1.0, "quality": 2.0}
SENSITIVITY = {"recast_kl2": "recast", "reading_kl2": "reading"}
SPREAD_RATIO = 1.25
# W's real-trainer null for `recast_live` (issue 57, item 5; the amendment's addendum F.1): the colour reward entered
# twice with independent jitter, equal budgets, the `recast_live` arm's recipe; its W's departure from λ/T is noise.
NULL_ARM, NULL_REWARDS, NULL_SEEDS = "null_live", ("color_jitter_a", "color_jitter_b"), tuple(range(10))
NULL_EVAL = ("--set", "eval_every=0", "--set", "eval_prompts=64")  # its W is what it is for: one final evaluation
PARTS = (*ARMS, "sensitivity", "null")  # what `run --arms` may name, in training order


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


def _run(setting: str, budget: str, lam, arm: str, seed: int, out_root, world: str, method: str, extra,
         select: tuple[str, ...], dense: tuple[str, ...] = DENSE) -> SweepRun:
    """One planned run: the paper preset, one torch thread, ``select`` the rewards (--setting or --rewards)."""
    out = Path(out_root) / setting / budget / arm / f"seed_{seed}"
    args = ("--preset", "paper", "--world", world, *select, "--method", method, "--lam", ",".join(f"{x:g}" for x in
            lam), "--seed", str(seed), "--out", str(out), "--set", "num_threads=1", *dense, *extra)
    return SweepRun(setting, budget, tuple(lam), arm, seed, out, args)


def _extra(arm: str, setting: str, budget: str) -> tuple[str, ...]:
    """An arm's own arguments, its weight table resolved for the (setting, budget)."""
    extra = ARMS[arm][1]
    if extra[:1] == ("table",):
        return "--weight-file", str(table_path(extra[1], setting, budget).relative_to(ROOT))
    return extra


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
                        runs.append(_run(setting, name, lam, arm, seed, out_root, world, ARMS[arm][0],
                                         _extra(arm, setting, name), ("--setting", setting)))
    return runs


def sensitivity_plan(settings=SETTINGS, *, out_root="runs/study/F", world: str = "data/digit_base") -> list[SweepRun]:
    """The sensitivity check's runs in the given settings: `recast` and `reading` at twice the setting's kl_beta,
    equal budget, each seed's pair together."""
    runs = []
    for seed in SEEDS:
        for setting in settings:
            lam = budgets(setting)["equal"]
            for arm, base in SENSITIVITY.items():
                runs.append(_run(setting, "equal", lam, arm, seed, out_root, world, ARMS[base][0],
                                 (*_extra(base, setting, "equal"), "--set", f"kl_beta={2 * KL_BETA[setting]:g}"),
                                 ("--setting", setting)))
    return runs


def null_plan(*, out_root="runs/study/F", world: str = "data/digit_base") -> list[SweepRun]:
    """W's real-trainer null for `recast_live`: one reward entered twice (independent jitter), equal budgets."""
    method, extra = ARMS["recast_live"]
    return [_run("null", "colour-twice", (1.0,) * len(NULL_REWARDS), NULL_ARM, seed, out_root, world, method, extra,
                 ("--rewards", ",".join(NULL_REWARDS)), NULL_EVAL) for seed in NULL_SEEDS]


RECORDS = STAGE_DIR / "records"


def _run_spread(rec: dict) -> float | None:
    """A record's combined-signal spread: the mean of its per-iteration `signal_sd` (None where it has none)."""
    vals = [v for v in rec.get("signal_sd", []) if v is not None]
    return sum(vals) / len(vals) if vals else None


def _spread(records: Path, setting: str, arm: str) -> float | None:
    sds = [sd for p in Path(records).glob(f"{setting}/*/{arm}/seed_*.json")
           if (sd := _run_spread(json.loads(p.read_text()))) is not None]
    return sum(sds) / len(sds) if sds else None


def sensitivity_due(records: Path = RECORDS) -> dict[str, dict]:
    """Per setting whose `recast` and `reading` runs are all in: the ratio of their mean signal spreads (the larger
    over the smaller) and whether the sensitivity check is due there (ratio > SPREAD_RATIO). Settings whose arms are
    not complete are absent: the check is decided once both arms are in."""
    out = {}
    for setting in SETTINGS:
        if any(r.setting == setting for r in missing(("recast", "reading"), records)):
            continue
        a, b = _spread(records, setting, "recast"), _spread(records, setting, "reading")
        if a and b:
            ratio = max(a, b) / min(a, b)
            out[setting] = dict(recast=a, reading=b, ratio=ratio, due=ratio > SPREAD_RATIO)
    return out


def record_path(run: SweepRun, records: Path = RECORDS) -> Path:
    return Path(records) / run.setting / run.budget / run.method / f"seed_{run.seed}.json"


def record(run: SweepRun, commit: str, stage: str = "F") -> dict:
    """A finished run's summary: everything the stage's tables read, and what identifies the run."""
    from recast.io import read_json
    from recast.trainer.metrics import load_run

    r = load_run(run.out_dir)
    cfg = read_json(Path(run.out_dir) / "config.json")
    plain = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("progress",)}
    return {"format": "recast-study-record/1", "stage": stage, "setting": run.setting, "budget": run.budget,
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


def _head(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "unknown"


def check_trainer(checkout: Path) -> str | None:
    """None when ``checkout`` can train the stage's runs as its commit: a clean checkout of this repository whose
    `python -m recast`, run there, imports its own recast; else why not, in one line."""
    checkout = Path(checkout).resolve()
    if not (checkout / "recast" / "__init__.py").is_file():
        return f"{checkout} is not a checkout of this repository (no recast/__init__.py)"
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    if dirty.returncode != 0:
        return f"{checkout} is not a git checkout: {dirty.stderr.strip()}"
    if dirty.stdout.strip():
        return (f"{checkout} has uncommitted changes ({dirty.stdout.strip().splitlines()[0].strip()}): its records "
                "would name a commit they were not trained on")
    probe = subprocess.run([sys.executable, "-c", "import recast; print(recast.__file__)"], cwd=checkout,
                           env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True)
    where = Path(probe.stdout.strip() or "?").resolve()
    if checkout not in where.parents:
        return f"python -m recast run in {checkout} imports {where}, not that checkout's recast"
    return None


@contextlib.contextmanager
def _inside(checkout: Path | None):
    """Run the sweep's children in ``checkout`` (their cwd, first on their path); nothing when None."""
    if checkout is None:
        yield
        return
    cwd, path = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(checkout)
    os.environ["PYTHONPATH"] = str(checkout)
    try:
        yield
    finally:
        os.chdir(cwd)
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path


def _train(todo: list[SweepRun], what: str, *, jobs: int, chunk: int, commit: bool, records: Path, head: str,
           stage: str = "F", make_record=None, path_of=None) -> int:
    """Train ``todo`` `chunk` at a time, writing (and committing) each finished run's record; the failures' count.
    ``make_record(run, commit)`` and ``path_of(run, records)`` default to this stage's `record` and `record_path`."""
    from recast.io import write_json

    make_record = make_record or record
    path_of = path_of or record_path
    print(f"stage {stage}, {what}: {len(todo)} runs without a record (trainer commit {head[:10]})", flush=True)
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
                written.append(write_json(path_of(r, records), make_record(r, head)))
        if commit and written:
            what = ", ".join(sorted({f"{r.setting}/{r.method}" for r in batch}))
            _commit_records(written, f"Study stage {stage}: {len(written)} run record{'s' * (len(written) != 1)} "
                                     f"({what})")
        print(f"{min(i + chunk, len(todo))}/{len(todo)} done, {rep.wall_time_s:.0f} s for this batch", flush=True)
    return failed


def run(*, jobs: int = 2, arms=PARTS, chunk: int = 4, commit: bool = False, out_root="runs/study/F",
        records: Path = RECORDS, new_trainer: bool = False, trainer: Path | None = None) -> int:
    """Train every planned run without a record, `chunk` at a time, recording (and committing) each as it lands: the
    arms in priority order, then the sensitivity check where it is due, then the null (``arms`` may name any of
    `PARTS`).

    Args:
        trainer: a checkout (e.g. a worktree at the records' commit) whose code trains the runs, this driver's
            own code writing and committing their records; default this checkout.

    Refused (exit 2, before any compute) when the training checkout's commit is not the one the records were trained
    on, unless ``new_trainer`` (a deviation the amendment asks to log first), or when ``trainer`` is not a clean
    checkout whose `python -m recast` imports its own code."""
    records = Path(records).resolve()
    checkout = Path(__file__).resolve().parent if trainer is None else Path(trainer).resolve()
    if trainer is not None and (why := check_trainer(checkout)):
        print(f"error: --trainer: {why}", file=sys.stderr)
        return 2
    head = _head(checkout)
    others = sorted(trainer_commits(records) - {head})
    if others and not new_trainer:
        print(f"error: stage F's records were trained on {', '.join(c[:10] for c in others)}, this trainer is "
              f"{head[:10]}: every run of the stage trains on one trainer commit. Continue from that commit: `git "
              f"worktree add --detach ../studyF {others[0][:10]}`, then here `python -m recast.experiments.study_f run "
              f"--jobs 2 --commit --trainer ../studyF`; or log a deviation in research/study/preregistration.md and "
              "pass --new-trainer", file=sys.stderr)
        return 2
    opts = dict(jobs=jobs, chunk=chunk, commit=commit, records=records, head=head)
    with _inside(checkout if trainer is not None else None):
        todo = [r for r in plan(out_root=out_root, arms=tuple(a for a in arms if a in ARMS))
                if not record_path(r, records).is_file()]
        failed = _train(todo, "the arms", **opts)
        if "sensitivity" in arms:
            due = sensitivity_due(records)
            for setting in SETTINGS:
                d = due.get(setting)
                print(f"sensitivity check, {setting}: " + (
                    "decided once recast and reading are in" if d is None else
                    f"mean signal spread recast {d['recast']:.3g}, reading {d['reading']:.3g}: ratio "
                    f"{d['ratio']:.2f}, {'due' if d['due'] else 'not due'} (> {SPREAD_RATIO:g})"), flush=True)
            todo = [r for r in sensitivity_plan([s for s, d in due.items() if d["due"]], out_root=out_root)
                    if not record_path(r, records).is_file()]
            failed += _train(todo, "the kl_beta sensitivity check", **opts)
        if "null" in arms:
            todo = [r for r in null_plan(out_root=out_root) if not record_path(r, records).is_file()]
            failed += _train(todo, "W's null for recast_live", **opts)
    return 1 if failed else 0


def missing(arms=tuple(ARMS), records: Path = RECORDS) -> list[SweepRun]:
    """The planned runs of these arms that have no record yet."""
    return [r for r in plan(arms=arms) if not record_path(r, records).is_file()]


def complete_arms(records: Path = RECORDS) -> tuple[str, ...]:
    """The arms every planned run of which has a record: the only ones the analysis reads (the amendment reads
    nothing of an arm until its runs are in). The sensitivity arms count once the check is decided in both settings
    and due in one at least, with all its due runs in; the null's once its seeds are in."""
    done = [a for a in ARMS if not missing((a,), records)]
    due = sensitivity_due(records)
    runs = sensitivity_plan([s for s, d in due.items() if d["due"]])
    if len(due) == len(SETTINGS) and runs and all(record_path(r, records).is_file() for r in runs):
        done += list(SENSITIVITY)
    if all(record_path(r, records).is_file() for r in null_plan()):
        done.append(NULL_ARM)
    return tuple(done)


def rel_departure(W) -> tuple[float, float] | None:
    """W's departure from λ/T (λ_k its row sums, T its columns): the max and the root mean square over cells of
    |W_kt T / λ_k − 1|; None without a W."""
    if W is None:
        return None
    import numpy as np

    W = np.asarray(W, dtype=float)
    rel = W * W.shape[1] / W.sum(1, keepdims=True) - 1.0
    return float(np.abs(rel).max()), float(np.sqrt((rel ** 2).mean()))


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
        dep = rel_departure(rec.get("W"))
        if dep is not None:
            rows.append(dict(key, iteration=last, images=0, metric="W/max_rel_departure", value=dep[0]))
            rows.append(dict(key, iteration=last, images=0, metric="W/rms_rel_departure", value=dep[1]))
        rows.append(dict(key, iteration=last, images=0, metric="signal/sd_mean", value=float(_run_spread(rec))))
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
    ap.add_argument("--arms", default=",".join(PARTS), help="comma-separated arms to train, or `sensitivity`, `null` "
                    f"(training order kept: {', '.join(PARTS)})")
    ap.add_argument("--commit", action="store_true", help="commit each batch's records as they land")
    ap.add_argument("--out-root", default="runs/study/F", help="run folders, relative to the training checkout")
    ap.add_argument("--records", default=str(RECORDS), help="where the run records go (default this checkout's "
                    "research/study/F/records)")
    ap.add_argument("--trainer", metavar="CHECKOUT", help="train in this checkout (a worktree at the records' "
                    "trainer commit), this checkout writing and committing the records")
    ap.add_argument("--new-trainer", action="store_true", help="train on a commit other than the records' (log the "
                    "deviation first)")
    a = ap.parse_args(argv)
    arms = tuple(x for x in a.arms.split(",") if x)
    bad = [x for x in arms if x not in PARTS]
    if bad:
        print(f"error: unknown arms {bad}; choose from {list(PARTS)}", file=sys.stderr)
        return 2
    records = Path(a.records)
    if a.command == "tables":
        for p in make_tables():
            print(p.relative_to(ROOT))
        return 0
    if a.command == "list":
        due = sensitivity_due(records)
        runs = plan(out_root=a.out_root, arms=tuple(x for x in arms if x in ARMS))
        if "sensitivity" in arms:
            runs += sensitivity_plan([s for s, d in due.items() if d["due"]], out_root=a.out_root)
            undecided = [s for s in SETTINGS if s not in due]
            if undecided:
                print(f"(the kl_beta sensitivity check is decided in {', '.join(undecided)} once recast and reading "
                      "are in)")
        runs += null_plan(out_root=a.out_root) if "null" in arms else []
        for r in runs:
            print(("done  " if record_path(r, records).is_file() else "todo  ") + r.command)
        return 0
    if a.command == "run":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        return run(jobs=a.jobs, arms=arms, chunk=a.chunk, commit=a.commit, out_root=a.out_root, records=records,
                   new_trainer=a.new_trainer, trainer=Path(a.trainer) if a.trainer else None)
    from recast.io import write_csv

    rows = collect(records, arms=complete_arms(records))
    write_csv(ROOT / "research" / "study" / "data" / "F.csv", rows)
    print(f"{len(rows)} rows of {len({(r['setting'], r['budget'], r['arm'], r['seed']) for r in rows})} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

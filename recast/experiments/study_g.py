"""Stage G of the pre-registered study: the paper's recipe with W from the model's own informativeness
(research/study/preregistration.md, "Amendment: stage G"), resumable from committed records as stage F.

    python -m recast.experiments.study_g tables                 # every arm's weight table of every (setting, budget)
    python -m recast.experiments.study_g check                  # the degenerate-column check of each arm's profile
    python -m recast.experiments.study_g list                   # every planned run, done or to do
    python -m recast.experiments.study_g run --jobs 2 --commit --trainer ../studyG   # train what has no record
    python -m recast.experiments.study_g collect                # the complete arms' records -> research/study/data/G.csv
    python -m recast.experiments.study_g_analysis analyse       # the pre-registered tables (once arms are complete)

Every run is a `python -m recast train --preset paper` command (dense evaluation, one torch thread) under
``runs/study/G/<setting>/<budget>/<arm>/seed_<s>``. A finished run's record (as stage F's, plus the final policy's
per-sample held-out verdicts on the evaluation's own prompts and noise, for the joint domination rates) goes to
``research/study/G/records/`` and, with ``--commit``, is committed at once; `run` skips every run with a record.
Every run of the stage trains on one trainer commit: ``--trainer CHECKOUT`` trains in a clean worktree at that commit
(`git worktree add --detach ../studyG <commit>`) while this checkout writes and commits the records. `recast_r16` is
planned only while its profile passes the degenerate-column check for both settings' rewards (the amendment's rule).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from recast.experiments.study_f import ROOT, budgets, rewards
from recast.experiments.sweep import SweepRun

__all__ = ["SETTINGS", "SEEDS", "ARMS", "METHODS", "STAGE_DIR", "RECORDS", "GT_FILE", "R16_PROFILE", "VERDICTS",
           "gt_divergences", "table_path", "make_tables", "profile_findings", "r16_usable", "planned_arms", "plan",
           "record_path", "record", "final_verdicts", "joint_rates", "missing", "complete_arms", "collect", "run", "main"]

STAGE_DIR = ROOT / "research" / "study" / "G"
SETTINGS = ("compose", "timing")
SEEDS = (0, 1, 2, 3, 4)
ARMS = ("static", "recast_gt", "recast", "recast_r16", "recast_live")  # the pre-registered order of priority
GT_FILE = ROOT / "research" / "tables" / "informativeness_base_256_s16.json"
RENDERINGS = ROOT / "data" / "profiles" / "digit_base_renderings_T6.npz"
R16_PROFILE = ROOT / "data" / "profiles" / "digit_base_renderings_M16_T6.npz"
RECORDS = STAGE_DIR / "records"
OUT_ROOT = "runs/study/G"
# arm -> (the trainer's method, its arguments; ("table",) resolves to the arm's table of the run's setting and budget)
METHODS = {
    "static": ("static", ()),
    "recast_gt": ("recast", ("table",)),
    "recast": ("recast", ("table",)),
    "recast_r16": ("recast", ("table",)),
    "recast_live": ("recast_live", ("--aggregation", "pre", "--set", "kernel=exp")),
}
# the per-sample held-out verdicts a record keeps (the digit world's `verdicts`; True = passes)
VERDICTS = ("digit", "color", "position", "size", "not_blur", "not_speckle", "not_fade")


def gt_divergences() -> tuple[list[str], np.ndarray, np.ndarray]:
    """(reward names, sigmas (T + 1,), D (K, T + 1)): the rollout ground truth's two batches' D averaged."""
    d = json.loads(GT_FILE.read_text())
    D = (np.asarray(d["rollout"]["D"], dtype=np.float64) + np.asarray(d["replicate"]["rollout"]["D"])) / 2
    return list(d["rollout"]["reward_names"]), np.asarray(d["rollout"]["sigmas"], dtype=np.float64), D


def table_path(arm: str, setting: str, budget: str) -> Path:
    """Where an arm's table lives: stage F's for `recast` in compose (as committed), stage G's otherwise."""
    if arm == "recast" and setting == "compose":
        return ROOT / "research" / "study" / "F" / "tables" / "renderings" / f"{setting}_{budget}.npz"
    folder = {"recast_gt": "gt", "recast": "renderings", "recast_r16": "r16"}[arm]
    return STAGE_DIR / "tables" / folder / f"{setting}_{budget}.npz"


def _gt_table(setting: str, lam):
    """The paper's exp-kernel table (τ = 1) of the ground truth's gains (D's differences clipped at 0)."""
    from recast.archives import WeightTable
    from recast.offline import paper_weights

    names, sigmas, D = gt_divergences()
    rows = [names.index(n) for n in rewards(setting)]
    D = D[rows]
    gains = np.maximum(np.diff(D, axis=1), 0.0)
    W32 = paper_weights(gains, lam).astype(np.float32).astype(np.float64)
    T = W32.shape[1]

    def f32(x):  # what a table file stores, so the table round-trips exactly
        return np.asarray(x, dtype=np.float32).astype(np.float64)

    table = WeightTable(rewards(setting), f32(sigmas), W32, f32(D[:, 1:]), f32(gains), f32(lam), np.ones(len(rows)),
                        2.0, f32(T * W32))
    table.validate("ground-truth table")
    return table


def make_tables(*, arms=("recast_gt", "recast", "recast_r16")) -> list[Path]:
    """Write every (arm, setting, budget) table stage G reads that is not stage F's; `recast_r16` only once its
    profile exists. Returns the paths written."""
    from recast.archives import load_profile, save_table, table_from_profile

    out = []
    for arm in arms:
        for setting in SETTINGS:
            for budget, lam in budgets(setting).items():
                target = table_path(arm, setting, budget)
                if arm == "recast_gt":
                    table = _gt_table(setting, list(lam))
                elif arm == "recast" and setting == "compose":
                    continue  # stage F's, as committed
                else:
                    source = RENDERINGS if arm == "recast" else R16_PROFILE
                    if not source.is_file():
                        continue
                    prof = load_profile(source, rewards(setting))
                    table = table_from_profile(prof, list(lam), reward_names=rewards(setting))
                save_table(table, target)
                out.append(target)
    return out


def profile_findings() -> dict:
    """Each profile's degenerate columns over both settings' rewards (`recast.checks.degenerate_columns`)."""
    from recast.archives import load_profile
    from recast.checks import degenerate_columns

    names = list(dict.fromkeys(n for s in SETTINGS for n in rewards(s)))
    out = {}
    for path in (RENDERINGS, R16_PROFILE):
        if path.is_file():
            out[str(path.relative_to(ROOT))] = [d.message for d in degenerate_columns(load_profile(path, names))]
    return out


def r16_usable() -> bool:
    """Whether `recast_r16` is in the stage: its profile exists and has no degenerate column for either setting's
    rewards (the amendment: "used only if it passes ... else the arm is dropped")."""
    findings = profile_findings()
    key = str(R16_PROFILE.relative_to(ROOT))
    return key in findings and not findings[key]


def planned_arms() -> tuple[str, ...]:
    """The stage's arms in priority order, `recast_r16` only when `r16_usable`."""
    return tuple(a for a in ARMS if a != "recast_r16" or r16_usable())


def _args(arm: str, setting: str, budget: str) -> tuple[str, ...]:
    extra = METHODS[arm][1]
    if extra[:1] == ("table",):
        return "--weight-file", str(table_path(arm, setting, budget).relative_to(ROOT))
    return extra


def plan(*, out_root: str = OUT_ROOT, arms=None, world: str = "data/digit_base") -> list[SweepRun]:
    """Every stage-G run in training order: `static` with `recast_gt` first, then `recast`, `recast_r16` and
    `recast_live`; within a group by seed, then setting, budget and arm (so the first runs are whole matched pairs)."""
    from recast.experiments.study_f import _run

    arms = planned_arms() if arms is None else tuple(a for a in arms if a in planned_arms())
    runs = []
    for group in (("static", "recast_gt"), ("recast",), ("recast_r16",), ("recast_live",)):
        for seed in SEEDS:
            for setting in SETTINGS:
                for budget, lam in budgets(setting).items():
                    for arm in group:
                        if arm in arms:
                            runs.append(_run(setting, budget, lam, arm, seed, out_root, world, METHODS[arm][0],
                                             _args(arm, setting, budget), ("--setting", setting)))
    return runs


def record_path(run: SweepRun, records: Path = RECORDS) -> Path:
    return Path(records) / run.setting / run.budget / run.method / f"seed_{run.seed}.json"


def final_verdicts(run_dir: str | Path) -> dict[str, str]:
    """The finished run's EMA policy sampled on its evaluation's own prompts and noise (`cfg.eval_prompts` test
    prompts, the evaluation generator's seed), each held-out per-sample verdict as a string of 0/1 (one character per
    sample, in prompt order): the matched (prompt, sample) pairs that the joint domination rates compare."""
    from recast.experiments.judge_eval import load_policy, sample_test_prompts
    from recast.io import read_json
    from recast.trainer.evaluation import EVAL_SEED_OFFSET
    cfg = read_json(Path(run_dir) / "config.json")
    if int(cfg.get("eval_group", 1)) != 1:
        raise ValueError(f"{run_dir}: eval_group {cfg['eval_group']}; stage G evaluates one sample per prompt")
    pol = load_policy(run_dir, "ema")
    if not hasattr(pol.world, "verdicts"):
        raise TypeError(f"{run_dir}: its world gives no per-sample verdicts (stage G runs in the digit world)")
    images, prompts = sample_test_prompts(pol, int(cfg["eval_prompts"]), seed=int(cfg["seed"]) + EVAL_SEED_OFFSET)
    verdicts = pol.world.verdicts(images, prompts)
    return {k: "".join("1" if bool(v) else "0" for v in verdicts[k].tolist()) for k in VERDICTS}


def record(run: SweepRun, commit: str) -> dict:
    """Stage F's record (`recast.experiments.study_f.record`, stage "G") with the final per-sample verdicts."""
    from recast.experiments import study_f

    return {**study_f.record(run, commit, stage="G"), "verdicts": final_verdicts(run.out_dir)}


def missing(arms=None, records: Path = RECORDS) -> list[SweepRun]:
    """The planned runs of these arms (default: every planned arm) that have no record yet."""
    return [r for r in plan(arms=arms) if not record_path(r, records).is_file()]


def complete_arms(records: Path = RECORDS) -> tuple[str, ...]:
    """The arms every planned run of which has a record: the only ones the analysis reads."""
    return tuple(a for a in planned_arms() if not missing((a,), records))


def collect(records_dir: Path = RECORDS, arms=None) -> list[dict]:
    """Long rows as stage F's `collect` (stage "G"), plus per run the joint domination and collapse rates against the
    matched `static` run (same setting, budget and seed) when both records have verdicts: ``joint/dominate`` the share
    of the evaluation's (prompt, sample) pairs where the arm passes every verdict static passes and one more,
    ``joint/collapse`` the reverse (the amendment's "better, or worse, on every per-sample judge at once", for
    pass/fail verdicts: a pair both pass or both fail on a judge is level on it)."""
    from recast.experiments import study_f

    rows = [dict(r, stage="G") for r in study_f.collect(Path(records_dir), arms=arms)]
    recs = {}
    for p in sorted(Path(records_dir).glob("*/*/*/seed_*.json")):
        rec = json.loads(p.read_text())
        if arms is None or rec["arm"] in arms:
            recs[(rec["setting"], rec["budget"], rec["arm"], rec["seed"])] = rec
    for (setting, budget, arm, seed), rec in sorted(recs.items()):
        base = recs.get((setting, budget, "static", seed))
        if arm == "static" or base is None or "verdicts" not in rec or "verdicts" not in base:
            continue
        dom, col = joint_rates(rec["verdicts"], base["verdicts"])
        key = dict(stage="G", setting=setting, budget=budget, arm=arm, seed=seed, iteration=rec["evals"][-1][
            "iteration"], images=0)
        rows += [dict(key, metric="joint/dominate", value=dom), dict(key, metric="joint/collapse", value=col)]
    return rows


def joint_rates(a: dict[str, str], b: dict[str, str]) -> tuple[float, float]:
    """(share of samples where ``a`` Pareto-dominates ``b`` over the verdicts, share where ``b`` dominates ``a``):
    per sample, a dominates when it passes every verdict b passes and at least one b fails.

    Raises:
        ValueError: the two name different verdicts or different sample counts (not a matched pair).
    """
    if sorted(a) != sorted(b) or {len(v) for v in a.values()} != {len(v) for v in b.values()} or len(
            {len(v) for v in a.values()}) != 1:
        raise ValueError("joint rates need two records of the same verdicts over the same samples")
    A = np.array([[c == "1" for c in a[k]] for k in sorted(a)])
    B = np.array([[c == "1" for c in b[k]] for k in sorted(b)])
    dom = (A >= B).all(0) & (A > B).any(0)
    col = (B >= A).all(0) & (B > A).any(0)
    return float(dom.mean()), float(col.mean())


def run(*, jobs: int = 2, arms=None, chunk: int = 2, commit: bool = False, out_root: str = OUT_ROOT,
        records: Path = RECORDS, new_trainer: bool = False, trainer: Path | None = None) -> int:
    """Train every planned run without a record, `chunk` at a time, recording (and committing) each batch as it
    lands (`recast.experiments.study_f.run`'s rules: one trainer commit for the stage, refused with exit 2 before any
    compute otherwise, or when ``trainer`` is not a clean checkout importing its own recast)."""
    from recast.experiments import study_f

    records = Path(records).resolve()
    checkout = Path(__file__).resolve().parent if trainer is None else Path(trainer).resolve()
    if trainer is not None and (why := study_f.check_trainer(checkout)):
        print(f"error: --trainer: {why}", file=sys.stderr)
        return 2
    head = study_f._head(checkout)
    others = sorted(study_f.trainer_commits(records) - {head})
    if others and not new_trainer:
        print(f"error: stage G's records were trained on {', '.join(c[:10] for c in others)}, this trainer is "
              f"{head[:10]}: every run of the stage trains on one trainer commit. Continue from that commit: `git "
              f"worktree add --detach ../studyG {others[0][:10]}`, then here `python -m recast.experiments.study_g run "
              f"--jobs 2 --commit --trainer ../studyG`; or log a deviation in research/study/preregistration.md and "
              "pass --new-trainer", file=sys.stderr)
        return 2
    with study_f._inside(checkout if trainer is not None else None):
        todo = [r for r in plan(out_root=out_root, arms=arms) if not record_path(r, records).is_file()]
        failed = study_f._train(todo, "the arms", jobs=jobs, chunk=chunk, commit=commit, records=records, head=head,
                                stage="G", make_record=record, path_of=record_path)
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m recast.experiments.study_g", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("tables", "check", "list", "run", "collect"))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--chunk", type=int, default=2, help="runs trained between two record commits")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms to train (of {', '.join(ARMS)}; "
                   "the priority order is kept)")
    p.add_argument("--commit", action="store_true", help="commit each batch's records as they land")
    p.add_argument("--out-root", default=OUT_ROOT, help="run folders, relative to the training checkout")
    p.add_argument("--records", default=str(RECORDS), help="where the run records go")
    p.add_argument("--trainer", metavar="CHECKOUT", help="train in this clean checkout (a worktree at the records' "
                   "trainer commit), this checkout writing and committing the records")
    p.add_argument("--new-trainer", action="store_true", help="train on a commit other than the records' (log the "
                   "deviation first)")
    args = p.parse_args(argv)
    arms = tuple(x for x in args.arms.split(",") if x)
    if bad := [x for x in arms if x not in ARMS]:
        print(f"error: unknown arms {bad}; choose from {list(ARMS)}", file=sys.stderr)
        return 2
    records = Path(args.records)
    if args.command == "tables":
        for path in make_tables():
            print(path.relative_to(ROOT))
        return 0
    if args.command == "check":
        findings = profile_findings()
        print(json.dumps(findings, indent=1))
        return 1 if any(findings.values()) else 0
    if args.command == "list":
        if "recast_r16" in arms and "recast_r16" not in planned_arms():
            print("(recast_r16 is dropped: its profile fails the degenerate-column check; see `check`)")
        for r in plan(out_root=args.out_root, arms=arms):
            print(("done  " if record_path(r, records).is_file() else "todo  ") + r.command)
        return 0
    if args.command == "run":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        return run(jobs=args.jobs, arms=arms, chunk=args.chunk, commit=args.commit, out_root=args.out_root,
                   records=records, new_trainer=args.new_trainer, trainer=Path(args.trainer) if args.trainer else None)
    from recast.io import write_csv

    rows = collect(records, arms=complete_arms(records))
    write_csv(ROOT / "research" / "study" / "data" / "G.csv", rows)
    print(f"{len(rows)} rows of {len({(r['setting'], r['budget'], r['arm'], r['seed']) for r in rows})} runs "
          f"(complete arms: {', '.join(complete_arms(records)) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

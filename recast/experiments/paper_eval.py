"""The paper's evaluation of its SD3.5-Medium experiments, from run folders (docs/paper-scale.md, "The paper's
experiments"): per setting, base, static and ReCAST means per training reward and per held-out judge over the
budgets x seeds grid, with ReCAST's wins out of the matched pairs, and a pairwise judge with both positions scored.

    python -m recast paper-eval runs/paper --out runs/paper_eval --num-prompts 1000 --device cuda

A run is identified by its config.json alone: its reward setting (the rewards it trained), its budgets (named by
`paper_budgets`: ``equal`` = (1, 1, 1, 1), ``<reward>-x2`` doubles one reward's), its method (``static`` or
``recast``, or the names given) and its seed. Runs of one setting with the same budget and seed, one per method, are
a matched pair (the paper's 15 = 5 budgets x 3 seeds). Every policy is sampled on the same held-out prompts with the
same starting noise (`recast.experiments.paper_scoring`, which also holds the command), each score is cached per
checkpoint, and the tables are:

- `paper_table`: rows are the training rewards, their sum ("aggregate", with PickScore at the release's scale, /26),
  then the judges; columns base, static, ReCAST (means over the matched pairs) and ReCAST's wins out of the pairs
  (strictly higher; equal means are counted as ties apart);
- `pairwise_summary`: each prompt's two images judged twice, ReCAST's first and then second, each verdict mapped
  back to "ReCAST vs static". The page (RECAST.md §0) reports "prefers ReCAST in 57.2 % of pairs" without saying how
  ties count; the headline here is the win rate over all judgments with ties counting half (`recast.winrate`'s
  convention), which is also the mean over pairs of each pair's two verdicts; the share of pairs whose two verdicts
  net in ReCAST's favour (ties and split verdicts not counted as wins) is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RELEASE_SCALES", "paper_budgets", "RunInfo", "identify", "find_runs", "matched_pairs", "paper_table",
           "PairwiseSummary", "pairwise_summary", "markdown"]

RELEASE_SCALES = {"pickscore": 1 / 26}  # our score -> the release's, used only for the aggregate row


def paper_budgets(rewards) -> dict[str, tuple[float, ...]]:
    """The paper's budget grid over `rewards` (in their order): ``equal`` and ``<reward>-x2`` for each reward."""
    names = tuple(rewards)
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"a budget grid needs at least two distinct rewards, got {names}")
    grid = {"equal": tuple(1.0 for _ in names)}
    grid.update({f"{r}-x2": tuple(2.0 if j == k else 1.0 for j in range(len(names))) for k, r in enumerate(names)})
    return grid


def _budget_name(rewards: tuple[str, ...], lam: tuple[float, ...]) -> str:
    """The paper grid's name of `lam` (compared after normalising), else "lam=a,b,..." of the normalised values."""
    total = sum(lam)
    norm = tuple(x / total for x in lam)
    for name, grid_lam in (paper_budgets(rewards).items() if len(rewards) > 1 else ()):
        if all(abs(a - b / sum(grid_lam)) < 1e-6 for a, b in zip(norm, grid_lam)):
            return name
    return "lam=" + ",".join(f"{x:.4g}" for x in norm)


@dataclass(frozen=True)
class RunInfo:
    """What the paper evaluation needs to know of a run, read from its config.json.

    Attributes:
        run_dir: the run folder. setting: its reward setting (config ``setting``, or the reward list when given).
        rewards: the rewards it trained. lam: its budgets (normalised). budget: their `paper_budgets` name.
        method: the config's method. role: "recast" or "static". seed: the config's seed.
    """

    run_dir: Path
    setting: str
    rewards: tuple[str, ...]
    lam: tuple[float, ...]
    budget: str
    method: str
    role: str
    seed: int


def identify(run_dir: str | Path, *, recast: str = "recast", static: str = "static") -> RunInfo | None:
    """The `RunInfo` of a run folder, or None when its method is neither `recast` nor `static`.

    Raises:
        FileNotFoundError: no config.json or no checkpoint.pt in `run_dir`.
        ValueError: a config whose setting or budgets cannot be read (naming the run).
    """
    from recast.config import resolve_world
    from recast.io import read_json
    from recast.world import world_info

    run_dir = Path(run_dir)
    for name in ("config.json", "checkpoint.pt"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir} is not a finished run (no {name})")
    cfg = read_json(run_dir / "config.json")
    method = str(cfg.get("method", ""))
    role = {recast: "recast", static: "static"}.get(method)
    if role is None:
        return None
    rewards = tuple(cfg.get("rewards") or ())
    setting = str(cfg.get("setting", "")) if not rewards else "+".join(rewards)
    if not rewards:
        settings = world_info(resolve_world(str(cfg.get("world")))).reward_settings
        if setting not in settings:
            raise ValueError(f"{run_dir}: setting {setting!r} is not one of its world's {sorted(settings)}")
        rewards = tuple(settings[setting])
    lam = tuple(float(x) for x in cfg.get("lam") or ()) or tuple(1.0 for _ in rewards)
    if len(lam) != len(rewards) or min(lam) < 0 or sum(lam) <= 0:
        raise ValueError(f"{run_dir}: budgets {lam} do not fit its rewards {rewards}")
    total = sum(lam)
    return RunInfo(run_dir, setting, rewards, tuple(x / total for x in lam), _budget_name(rewards, lam), method,
                   role, int(cfg.get("seed", 0)))


def find_runs(paths) -> list[Path]:
    """Run folders (holding config.json) among `paths` and below them, sorted; each path must exist."""
    found = set()
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such run folder")
        found |= {c.parent for c in ([p / "config.json"] if (p / "config.json").is_file() else p.rglob("config.json"))}
    return sorted(found)


def matched_pairs(infos: list[RunInfo]) -> tuple[dict[str, list[tuple[RunInfo, RunInfo]]], list[RunInfo]]:
    """Per setting, the (ReCAST, static) pairs sharing budget and seed, sorted by budget then seed; and the runs left
    without a partner.

    Raises:
        ValueError: two runs of one role in the same (setting, budget, seed) cell (naming both).
    """
    cells: dict[tuple, dict[str, RunInfo]] = {}
    for info in infos:
        cell = cells.setdefault((info.setting, info.budget, info.seed), {})
        if info.role in cell:
            raise ValueError(f"two {info.role} runs for setting {info.setting!r}, budget {info.budget!r}, seed "
                             f"{info.seed}: {cell[info.role].run_dir} and {info.run_dir}")
        cell[info.role] = info
    pairs: dict[str, list] = {}
    alone = []
    for (setting, budget, seed), cell in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if len(cell) == 2:
            pairs.setdefault(setting, []).append((cell["recast"], cell["static"]))
        else:
            alone += list(cell.values())
    return pairs, alone


def _mean(values) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else math.nan


def paper_table(pairs: list[tuple[str, str]], scores: dict[str, dict[str, float]], base: dict[str, float],
                rewards: tuple[str, ...], judges: tuple[str, ...]) -> list[dict]:
    """The paper's table of one setting.

    Args:
        pairs: (ReCAST key, static key) per matched pair; keys index `scores`.
        scores: key -> metric -> mean score of that policy.
        base: metric -> the base model's mean score.
        rewards, judges: the rows, in order (an "aggregate" row follows the rewards when there are two or more).

    Returns one dict per row: metric, kind ("reward" | "aggregate" | "judge"), base, static, recast, wins, ties,
    pairs (the pairs where both scores are finite), and ``wins_of`` ("13/15").
    """
    def agg(d):
        return sum(d.get(r, math.nan) * RELEASE_SCALES.get(r, 1.0) for r in rewards)

    rows = [(m, "reward", lambda d, m=m: d.get(m, math.nan)) for m in rewards]
    if len(rewards) > 1:
        rows.append(("aggregate", "aggregate", agg))
    rows += [(m, "judge", lambda d, m=m: d.get(m, math.nan)) for m in judges]
    out = []
    for metric, kind, get in rows:
        both = [(get(scores[a]), get(scores[b])) for a, b in pairs]
        both = [(x, y) for x, y in both if math.isfinite(x) and math.isfinite(y)]
        wins, ties = sum(x > y for x, y in both), sum(x == y for x, y in both)
        out.append({"metric": metric, "kind": kind, "base": get(base), "static": _mean(y for _, y in both),
                    "recast": _mean(x for x, _ in both), "wins": wins, "ties": ties, "pairs": len(both),
                    "wins_of": f"{wins}/{len(both)}"})
    return out


@dataclass(frozen=True)
class PairwiseSummary:
    """ReCAST against static under a pairwise judge, both positions scored (module docstring).

    Attributes:
        win_rate: over all judgments, ties half (the headline); ci_low, ci_high: its Wilson interval.
        wins, losses, ties, abstained: judgment counts (two judgments per pair).
        pairs: pairs with at least one usable judgment; pair_wins, pair_losses, pair_ties: pairs whose judgments
            net for ReCAST, for static, or to zero; pair_win_share = pair_wins / pairs.
        position_agreement: share of pairs judged usable in both orders whose two verdicts agree.
    """

    win_rate: float
    ci_low: float
    ci_high: float
    wins: int
    losses: int
    ties: int
    abstained: int
    pairs: int
    pair_wins: int
    pair_losses: int
    pair_ties: int
    pair_win_share: float
    position_agreement: float = field(default=math.nan)


def pairwise_summary(verdicts: list[tuple[int | None, int | None]], confidence: float = 0.95) -> PairwiseSummary:
    """Summarise per-pair (ReCAST shown first, ReCAST shown second) verdicts, each +1 (ReCAST better), -1, 0 or None.

    Raises:
        ValueError: a verdict outside {+1, -1, 0, None}.
    """
    from recast.winrate import aggregate_verdicts

    flat = [v for pair in verdicts for v in pair]
    r = aggregate_verdicts(flat, confidence)
    nets = [sum(v for v in pair if v is not None) for pair in verdicts if any(v is not None for v in pair)]
    both = [pair for pair in verdicts if None not in pair]
    pw, pl = sum(n > 0 for n in nets), sum(n < 0 for n in nets)
    return PairwiseSummary(r.win_rate, r.ci_low, r.ci_high, r.wins, r.losses, r.ties, r.abstained, len(nets), pw, pl,
                           len(nets) - pw - pl, pw / len(nets) if nets else math.nan,
                           sum(a == b for a, b in both) / len(both) if both else math.nan)


def _fmt(x) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.4g}"


def markdown(setting: str, table: list[dict], pairwise: PairwiseSummary | None = None) -> str:
    """The paper's table form of one setting (rows: rewards, aggregate, judges; columns base, static, ReCAST,
    wins/pairs), and the pairwise judge's line."""
    n = max((r["pairs"] for r in table), default=0)
    lines = [f"**{setting}**", "", f"| | base | static | ReCAST | wins/{n} |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in table:
        label = f"*{r['metric']}*" if r["kind"] == "judge" else r["metric"]
        lines.append(f"| {label} | {_fmt(r['base'])} | {_fmt(r['static'])} | {_fmt(r['recast'])} | {r['wins_of']} |")
    if pairwise is not None:
        lines += ["", f"pairwise judge, both positions: ReCAST wins {100 * pairwise.win_rate:.1f} % of judgments "
                      f"(ties half; {100 * pairwise.ci_low:.1f}-{100 * pairwise.ci_high:.1f} %), "
                      f"{pairwise.pair_wins} of {pairwise.pairs} pairs net for ReCAST, {pairwise.pair_losses} for "
                      f"static; {pairwise.abstained} judgments abstained"]
    return "\n".join(lines)

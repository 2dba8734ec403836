"""What the pairwise judge sees when it prefers uniform's quality samples to ReCAST's (notebook 06 at 1,024 samples).

    python research/probes/pairwise_probe.py                        # quality, every budget, seeds 0-2, ~9 min
    python research/probes/pairwise_probe.py --budgets sharpness-heavy --draws 1
    python research/probes/pairwise_probe.py --table research/tables/pairwise_probe_quality.csv   # re-print, no sampling
    python research/probes/pairwise_probe.py --rewards sharpness,clean,contrast --budgets uniform,sharpness-heavy \
        --out-root runs/variants_quality_norealism --name pairwise_probe_quality_norealism   # an ablation, 4.5 min

Notebook 06 (``-p draws 4``) found ReCAST losing the pairwise judge to uniform in all five quality budgets (win rate
0.40-0.44) while every per-image judge tied and ReCAST's Fréchet distance was lower. The pairwise judge decides a
pair by the attribute count first and by the distance to the nearest real canvas second
(`recast.worlds.digits.judges.preference`). This probe samples the same policies on notebook 06's draws (per-seed noise
seeds, `recast.experiments.judge_eval.draw_seeds`) and reports, per budget:

- the win rate split by the term that decided it (`recast.worlds.digits.judges.breakdown`); it reproduces notebook 06's win
  rates exactly;
- for base, ReCAST and uniform: the mean attribute count, the mean nearest-real distance, improved precision and
  recall against as many real judge-split canvases of the same prompts (`recast.worlds.digits.judges.precision_recall`,
  k = 3), the Fréchet distance and the within-prompt diversity;
- the win rate with a wider tie band on the distance (a sensitivity check; the judge keeps its own), and against
  re-drawn real reference sets of 16 and 256 canvases per prompt;
- among pairs with equal attribute counts, the Spearman correlation of the distance shift (ReCAST − uniform) with
  the paired change of each quality reward and defect verdict: what goes with a sample being farther from real.

Precision reads fidelity (does a sample look like some real canvas), recall coverage (does the policy reach the real
variety); the Fréchet distance mixes both, the pairwise quality term reads only the first. Writes
research/tables/pairwise_probe_<setting>.csv (one row per budget, seed and policy, and one per budget and seed for the
pairwise split).
"""

from __future__ import annotations

import argparse

TOLERANCES: tuple[float, ...] = (0.05, 0.5, 1.0, 2.0)  # quality-distance tie bands; 0.05 is the judge's own
REFERENCES: tuple[int, ...] = (16, 256)  # real canvases per prompt of the re-drawn reference sets (the judge's: 16)


def nearest_real(feats, prompts: list[str], refs: dict):
    """Distance ``(B,)`` from each feature row to the nearest of its prompt's reference features ``refs[prompt]``."""
    import torch

    return torch.stack([(refs[p] - f[None]).norm(dim=-1).min() for f, p in zip(feats, prompts)])


def reference_sets(prompts: list[str], k: int):
    """Judge features of ``k`` real judge-split canvases per prompt, drawn apart from the judge's own references
    (generator seed 10_000 + k * 1_000 + the prompt's index)."""
    import torch

    from recast.worlds.digits import data, judges

    order = data.all_specs()
    out = {}
    for p in dict.fromkeys(prompts):
        gen = torch.Generator().manual_seed(10_000 + k * 1_000 + order.index(data.parse_prompt(p)))
        out[p] = judges.judge_features(data.render([p] * k, glyph_split="judge", generator=gen))
    return out


def main(argv: list[str] | None = None) -> None:
    import torch
    from scipy.stats import spearmanr

    from recast.worlds.digits import data, judges
    from recast.worlds.digits.rewards import SETTINGS
    from recast.io import read_csv, write_csv
    from recast.experiments.judge_eval import draw_seeds, load_policy, sample_policy
    from recast.experiments.sweep import budget_grid, is_finished, plan_sweep, results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", default="quality")
    ap.add_argument("--budgets", default="", help="comma-separated sweep budgets (default: every budget)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--draws", type=int, default=4, help="per-seed draws, as notebook 06's -p draws")
    ap.add_argument("--out-root", default="runs/sweep")
    ap.add_argument("--rewards", default="", help="the reward list the runs trained (plan_sweep's sets), if not the "
                                                  "setting's")
    ap.add_argument("--method", default="recast", help="the method judged against the baseline")
    ap.add_argument("--baseline", default="uniform")
    ap.add_argument("--baseline-root", default="", help="where the baseline's runs are, if not under --out-root")
    ap.add_argument("--name", default="", help="CSV name stem (default pairwise_probe_<setting>)")
    ap.add_argument("--table", help="print the table of a CSV this script wrote, without sampling")
    args = ap.parse_args(argv)
    if args.table:
        return report(read_csv(args.table))

    rewards = tuple(r for r in args.rewards.split(",") if r) or SETTINGS[args.setting]
    budgets = tuple(b for b in args.budgets.split(",") if b) or tuple(budget_grid(rewards))
    seeds = tuple(int(s) for s in args.seeds.split(","))
    A, B = args.method, args.baseline
    sets = {"rewards": ",".join(rewards)} if args.rewards else None
    runs = plan_sweep(settings=(args.setting,), budgets=budgets, methods=(A,), seeds=seeds, out_root=args.out_root,
                      sets=sets)
    runs += plan_sweep(settings=(args.setting,), budgets=budgets, methods=(B,), seeds=seeds, sets=sets,
                       out_root=args.baseline_root or args.out_root)
    missing = [str(r.out_dir) for r in runs if not is_finished(r)]
    if missing:
        raise SystemExit(f"unfinished runs (run notebook 05 first): {missing}")
    rows = []
    for seed in seeds:
        noise = draw_seeds(0, seed, args.draws, per_seed=True)
        by_budget = {b: {r.method: r for r in runs if r.budget == b and r.seed == seed} for b in budgets}
        base = load_policy(by_budget[budgets[0]][A].out_dir, which="base")
        pool = base.world.prompts("test")
        prompts = [pool[i % len(pool)] for i in range(args.num_prompts)] * len(noise)
        real = torch.cat([data.render(prompts[:args.num_prompts], glyph_split="judge",
                                      generator=torch.Generator().manual_seed(1000 + ns)) for ns in noise])
        real_feats = judges.judge_features(real)
        refs = {k: reference_sets(prompts, k) for k in REFERENCES}

        def sample(p):
            return torch.cat([sample_policy(p, prompts[:args.num_prompts], seed=ns) for ns in noise])

        def describe(budget: str, policy: str, x: torch.Tensor) -> dict:
            prec, rec = judges.precision_recall(real_feats, judges.judge_features(x))
            return {"budget": budget, "seed": seed, "policy": policy, "n": len(x),
                    "attributes_right": float(judges.judge_attributes(x, prompts).count().double().mean()),
                    "nearest_real": float(judges.quality_distance(x, prompts).mean()),
                    "precision": prec, "recall": rec,
                    "frechet": judges.frechet_distance(judges.judge_features(x), real_feats),
                    "diversity": judges.diversity(x, prompts)}

        real_again = torch.cat([data.render(prompts[:args.num_prompts], glyph_split="judge",
                                            generator=torch.Generator().manual_seed(2000 + ns)) for ns in noise])
        rows.append(describe("", "real", real_again))  # the metrics' ceiling: real canvases of another draw
        rows.append(describe("", "base", sample(base)))
        for b in budgets:
            images = {m: sample(load_policy(r.out_dir)) for m, r in by_budget[b].items()}
            rows += [describe(b, m, images[m]) for m in (A, B)]
            bd = judges.breakdown(images[A], images[B], prompts)
            faith = judges.judge_attributes(images[A], prompts).count() - judges.judge_attributes(images[B],
                                                                                                    prompts).count()
            dq_all = (judges.quality_distance(images[A], prompts)
                      - judges.quality_distance(images[B], prompts))  # > 0: the baseline closer to real
            dq = dq_all[faith == 0]
            # the same judge with a wider tie band on the quality term (the committed judge: TIE_TOLERANCE)
            extra = {}
            for tol in TOLERANCES:
                v = torch.where(faith != 0, faith.sign(), torch.where(dq_all.abs() < tol, 0, -dq_all.sign()))
                extra[f"win_rate_tol{tol:g}"] = float(((v > 0).sum() + (v == 0).sum() / 2) / len(v))
            # what goes with a larger distance: the quality rewards' and the defect judges' paired changes
            same = faith == 0
            defects = {m: judges.judge_defects(images[m]) for m in (A, B)}
            for name in SETTINGS["quality"]:
                fn = base.world.reward(name, "cpu")
                d = (fn(images[A], prompts) - fn(images[B], prompts)).double()
                extra[f"rho_{name}"] = float(spearmanr(d[same], dq).statistic)
                extra[f"delta_{name}"] = float(d.mean())
            for k in ("blur", "speckle", "fade"):
                d = getattr(defects[A], k).double() - getattr(defects[B], k).double()
                extra[f"rho_{k}"] = float(spearmanr(d[same], dq).statistic)
            # the same judge against re-drawn reference sets: another 16 canvases per prompt, and 256
            feats = {m: judges.judge_features(images[m]) for m in (A, B)}
            for k, ref in refs.items():
                d = nearest_real(feats[A], prompts, ref) - nearest_real(feats[B], prompts, ref)
                v = torch.where(faith != 0, faith.sign(), torch.where(d.abs() < judges.preference.TIE_TOLERANCE,
                                                                      0, -d.sign()))
                extra[f"win_rate_refs{k}"] = float(((v > 0).sum() + (v == 0).sum() / 2) / len(v))
                extra[f"dq_mean_refs{k}"] = float(d[faith == 0].mean())
            rows.append({"budget": b, "seed": seed, "policy": f"{A} vs {B}", "n": bd.n,
                         "win_rate": bd.win_rate, **{k: getattr(bd, k) for k in (
                             "faith_wins", "faith_losses", "quality_wins", "quality_losses", "ties",
                             "decided_distance_a", "decided_distance_b")},
                         "dq_mean": float(dq.mean()), "dq_median": float(dq.median()), "dq_sd": float(dq.std()),
                         "dq_small": float((dq.abs() < 1.0).double().mean()), **extra})
            print(f"seed {seed} {b}: win rate {bd.win_rate:.4f}", flush=True)
    path = results_dir() / f"{args.name or 'pairwise_probe_' + args.setting}.csv"
    write_csv(path, rows)
    print(f"wrote {path}")
    report(rows)


def report(rows: list[dict]) -> None:
    """Per budget: the pairwise split (mean over seeds), and each policy's fidelity and coverage (mean ± seed-std)."""
    import numpy as np

    def f(x) -> float:
        return float(x) if x not in ("", None) else float("nan")

    budgets = list(dict.fromkeys(r["budget"] for r in rows if r["budget"]))
    pairs = [r for r in rows if " vs " in r["policy"]]
    A, B = pairs[0]["policy"].split(" vs ")
    print(f"\n{A} (R) vs {B} (U), pairwise judge, {int(f(pairs[0]['n']))} pairs per seed "
          f"(share of pairs, mean over seeds)")
    print(f"{'budget':16s} {'win rate':>9s} {'by attributes W/L':>18s} {'by quality W/L':>16s} {'ties':>6s} "
          f"{'decided dist. R/U':>18s} {'dist. R - U: mean, median, sd':>30s} {'|R - U| < 1':>12s}")
    for b in budgets:
        ps = [r for r in pairs if r["budget"] == b]
        m = {k: np.mean([f(r[k]) / f(r["n"]) if k.endswith(("wins", "losses", "ties")) else f(r[k])
                         for r in ps]) for k in ("win_rate", "faith_wins", "faith_losses", "quality_wins",
                                                 "quality_losses", "ties", "decided_distance_a",
                                                 "decided_distance_b", "dq_mean", "dq_median", "dq_sd",
                                                 "dq_small")}
        print(f"{b:16s} {m['win_rate']:9.3f} {m['faith_wins']:8.3f}/{m['faith_losses']:.3f} "
              f"{m['quality_wins']:8.3f}/{m['quality_losses']:.3f} {m['ties']:6.3f} "
              f"{m['decided_distance_a']:9.3f}/{m['decided_distance_b']:.3f} "
              f"{m['dq_mean']:+10.3f} {m['dq_median']:+8.3f} {m['dq_sd']:8.3f} {m['dq_small']:12.3f}")
    def budget_mean(k: str, b: str, mean=np.mean) -> float:
        return float(mean([f(r[k]) for r in pairs if r["budget"] == b]))

    def table(title: str, prefix: str, label: str = "", fmt: str = "10.3f", mean=np.mean) -> None:
        keys = [k for k in pairs[0] if k.startswith(prefix)]
        if keys:
            print(f"\n{title}\n{'budget':16s} " + " ".join(f"{label + k[len(prefix):]:>10s}" for k in keys))
            for b in budgets:
                print(f"{b:16s} " + " ".join(f"{budget_mean(k, b, mean):{fmt}}" for k in keys))

    table("win rate (mean over seeds) when quality differences below a tie band count as ties", "win_rate_tol",
          "band ")
    ref_keys = [k for k in pairs[0] if k.startswith("win_rate_refs")]
    if ref_keys:
        print("\nwin rate and mean distance shift R - U (mean over seeds) against re-drawn real reference sets")
        print(f"{'budget':16s} " + " ".join(f"{k[len('win_rate_refs'):] + ' refs/prompt':>24s}" for k in ref_keys))
        for b in budgets:
            print(f"{b:16s} " + " ".join(f"{budget_mean(k, b):10.3f} "
                                         f"{budget_mean(k.replace('win_rate', 'dq_mean'), b):+13.3f}"
                                         for k in ref_keys))
    table("equal-attribute pairs: Spearman of the distance shift R - U with each paired change R - U (mean over "
          "seeds)", "rho_", fmt="+10.3f", mean=np.nanmean)
    keys = ("attributes_right", "nearest_real", "precision", "recall", "frechet", "diversity")
    print(f"\n{'budget':16s} {'policy':8s} " + " ".join(f"{k:>17s}" for k in keys))
    for b in [""] + budgets:
        for pol in ("real", "base") if not b else (A, B):
            rs = [r for r in rows if (r["budget"] or "") == b and r["policy"] == pol]  # a CSV reads "" as None
            cells = []
            for k in keys:
                v = np.array([f(r[k]) for r in rs])
                cells.append(f"{v.mean():9.3f} ± {v.std(ddof=1) if len(v) > 1 else 0:5.3f}")
            print(f"{b or '-':16s} {pol:8s} " + " ".join(cells))


if __name__ == "__main__":
    main()

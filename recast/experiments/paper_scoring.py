"""Sampling and scoring for the paper's evaluation (`recast.experiments.paper_eval`), cached per checkpoint.

Every policy of a setting (the base model, each run's trained weights) is sampled on the same held-out prompts with
the same starting noise (`recast.experiments.judge_eval.sample_policy`), and each training reward and judge scores
the images; a judge's NaN (an abstention, e.g. UnifiedReward-2's) is left out of its mean and counted. Runs whose
base model, LoRA shape and sampler match the first run's are sampled by loading their policy into one world, so an
SD3.5 pipeline loads once per setting, not once per run.

Each score is a small JSON file, ``<cache>/<checkpoint sha256[:16]>/<metric>.<spec[:12]>.json``, keyed by the
checkpoint's SHA-256 (the base model's by its world fingerprint) and by the evaluation's spec (the prompts, their
count, the noise seed, which weights): a rerun samples only the policies with a score missing, and scores only what is
missing. A pair's pairwise verdicts are cached the same way, in ``<cache>/pair-<ReCAST's>-<static's>/`` (16 hex digits
of each hash).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from recast.experiments.paper_eval import find_runs, identify, markdown, matched_pairs, paper_table, pairwise_summary

__all__ = ["file_sha256", "spec_hash", "base_key", "ScoreCache", "PaperEval", "evaluate_paper", "add_parser", "run", "main"]


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def spec_hash(spec: dict) -> str:
    """SHA-256 of a JSON-able evaluation spec (sorted keys)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


class ScoreCache:
    """One JSON record per (policy key, metric, spec) under `root`; a damaged or mismatched file reads as missing."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str, name: str, spec: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        folder = "-".join(part[:16] for part in key.split("-"))  # "pair-<a>-<b>" keeps 16 hex digits of each hash
        return self.root / folder / f"{safe}.{spec[:12]}.json"

    def load(self, key: str, name: str, spec: str) -> dict | None:
        from recast.io import read_json

        try:
            rec = read_json(self.path(key, name, spec))
        except (OSError, ValueError):
            return None
        ok = isinstance(rec, dict) and (rec.get("key"), rec.get("name"), rec.get("spec")) == (key, name, spec)
        return rec if ok else None

    def save(self, key: str, name: str, spec: str, record: dict) -> Path:
        from recast.io import write_json

        return write_json(self.path(key, name, spec), {"key": key, "name": name, "spec": spec, **record})


@dataclass
class PaperEval:
    """What `evaluate_paper` measured.

    Attributes:
        settings: setting -> {"table": `paper_eval.paper_table` rows, "pairwise": a `PairwiseSummary` or None,
            "pairs": [(ReCAST run, static run, budget, seed)], "base": metric -> the base model's mean (averaged
            over the pairs when runs start from different bases, as a random world's seeds do), "bases": base key ->
            metric -> mean, "runs": run -> metric -> mean}.
        alone: runs without a matched partner (not in the tables). skipped: runs of other methods.
        sampled: policies sampled in this call; scored: (policy, metric) scores computed; judged: pairs judged
            (all 0 when everything came from the cache).
    """

    settings: dict
    alone: list
    skipped: list
    sampled: int = 0
    scored: int = 0
    judged: int = 0

    def markdown(self) -> str:

        return "\n\n".join(markdown(s, v["table"], v["pairwise"]) for s, v in self.settings.items())


def base_key(run_dir: Path) -> str:
    """The cache key of a run's base model: "base-" and its world fingerprint (else a hash of its world, world
    settings and seed, which decide the base of a random world)."""
    from recast.io import read_json

    cfg = read_json(Path(run_dir) / "config.json")
    fp = _sampling_key(cfg)
    return "base-" + (fp[0] if fp else spec_hash({k: cfg.get(k) for k in ("world", "world_settings", "seed")}))


def _sampling_key(cfg: dict):
    """What must match for two runs to share one loaded world: base weights, LoRA shape, sampler, world settings."""
    fp = (cfg.get("_run") or {}).get("world_fingerprint") if isinstance(cfg.get("_run"), dict) else None
    ws = {k: v for k, v in (cfg.get("world_settings") or {}).items() if k not in ("judges", "vlm_judge", "reward_root")}
    return None if fp is None else (fp, cfg.get("world"), cfg.get("lora_rank"), cfg.get("lora_alpha"),
                                    cfg.get("num_steps"), cfg.get("shift"), json.dumps(ws, sort_keys=True))


class _Setting:
    """Sampling and scoring of one setting's policies (see the module docstring)."""

    def __init__(self, first: Path, *, prompts_n, split, noise_seed, which, device, batch_size, world_settings):
        from recast.experiments.judge_eval import load_policy
        from recast.io import read_json

        self.base = load_policy(first, which="base", world_settings=world_settings)
        self.base.world.to(device)
        self.cfg = read_json(first / "config.json")
        pool = self.base.world.prompts(split)
        self.prompts = [pool[i % len(pool)] for i in range(prompts_n or len(pool))]
        self.which, self.device, self.batch_size = which, device, batch_size
        self.noise_seed, self.world_settings = noise_seed, world_settings
        self.spec = {"prompts": hashlib.sha256("\n".join(self.prompts).encode()).hexdigest(), "n": len(self.prompts),
                     "noise_seed": noise_seed, "which": which, "split": split}
        self.scorers: dict = {}

    def images(self, run_dir: Path, base: bool = False) -> torch.Tensor:
        """ODE samples of a run's policy, or of its base model, on the shared prompts and noise."""
        from recast.experiments.judge_eval import load_policy, sample_policy
        from recast.io import read_json
        from recast.trainer.checkpoint import load_checkpoint

        which = "base" if base else self.which
        key = _sampling_key(read_json(run_dir / "config.json"))
        if key is not None and key == _sampling_key(self.cfg):  # one loaded world serves every such run
            if not base:
                self.base.policy.load_state_dict(load_checkpoint(run_dir)["policy"])
            p = dataclasses.replace(self.base, run_dir=run_dir, which=which)
        else:
            p = load_policy(run_dir, which=which, world_settings=self.world_settings)
            p.world.to(self.device)
        return sample_policy(p, self.prompts, seed=self.noise_seed, batch_size=self.batch_size)

    def score(self, name: str, images: torch.Tensor) -> dict:
        """{"mean", "n", "abstained"} of one metric on `images`, scored in batches (whole for groupwise rewards)."""
        if name not in self.scorers:
            self.scorers[name] = self.base.world.reward(name, self.device)
        fn = self.scorers[name]
        step = len(images) if getattr(fn, "groupwise", False) else self.batch_size  # a group scorer sees all at once
        values = torch.cat([fn(images[i:i + step].to(self.device), self.prompts[i:i + step]).float().cpu()
                            for i in range(0, len(images), step)])
        finite = values[torch.isfinite(values)]
        return {"mean": float(finite.mean()) if len(finite) else math.nan, "n": len(finite),
                "abstained": int(len(values) - len(finite))}


def _unfinished(run_dir: Path) -> str:
    """'' for a finished run (`recast.trainer.rundir.is_finished`), else '<run>: iteration N of M'."""
    from recast.io import read_json, read_jsonl
    from recast.trainer.rundir import is_finished

    planned = read_json(run_dir / "config.json").get("iterations")
    if is_finished(run_dir, planned):
        return ""
    try:
        reached = read_jsonl(run_dir / "metrics.jsonl")[-1].get("iteration")
    except (OSError, ValueError, IndexError, AttributeError):
        reached = 0
    return f"{run_dir}: iteration {reached} of {planned}"


def evaluate_paper(run_dirs, *, out: str | Path | None = None, cache_dir: str | Path | None = None,
                   num_prompts: int = 0, split: str = "test", noise_seed: int = 0, judges=None, pairwise: bool = True,
                   pairwise_prompts: int = 0, which: str = "ema", device: str = "cpu", batch_size: int = 16,
                   recast: str = "recast", static: str = "static", world_settings: dict | None = None) -> PaperEval:
    """The paper's tables from run folders (`paper_eval` module docstring), sampled and scored as above.

    Args:
        run_dirs: run folders, or folders holding them (searched below for config.json).
        out: where paper_eval.json and per setting paper_<setting>.{csv,md} go (None: nowhere).
        cache_dir: the score cache (default: ``out/cache``; required when ``out`` is None).
        num_prompts: held-out prompts per policy, the `split`'s prompts cycled (0: each once).
        judges: the held-out judges (default: the world's ``settings.judges``, SD3's configured judges).
        pairwise, pairwise_prompts: judge every matched pair with the world's pairwise judge (`prefer`, where the
            world has one configured) on its first `pairwise_prompts` prompts (0: all), both positions.
        which: "ema" or "params" (identical when ema_decay is 0, as in the paper).
        recast, static: the config methods that play ReCAST and the static baseline.
        world_settings: settings over each run's (e.g. SD3's vlm_judge for the pairwise judge).

    Raises:
        ValueError: no matched pair, two runs in one cell, or bad arguments. FileNotFoundError: a missing run.
    """

    if num_prompts < 0 or pairwise_prompts < 0 or batch_size < 1 or which not in ("ema", "params"):
        raise ValueError("need num_prompts >= 0, pairwise_prompts >= 0, batch_size >= 1, which ema | params")
    if out is None and cache_dir is None:
        raise ValueError("give out or cache_dir: the scores are cached per checkpoint")
    cache = ScoreCache(cache_dir or Path(out) / "cache")
    infos, skipped = [], []
    for d in find_runs(run_dirs):
        info = identify(d, recast=recast, static=static)
        if info is None:
            skipped.append(d)
        else:
            infos.append(info)
    unfinished = [line for line in (_unfinished(info.run_dir) for info in infos) if line]
    if unfinished:  # a killed run's partial checkpoint is not the method's result (its table row would say it is)
        raise ValueError(f"{len(unfinished)} run(s) never finished: {'; '.join(unfinished[:3])}; finish them "
                         "(train --auto) or leave them out of the folders given")
    pairs, alone = matched_pairs(infos)
    if not pairs:
        raise ValueError(f"no matched {recast}/{static} pair (same setting, budget and seed) among {len(infos)} runs")
    result = PaperEval({}, alone, skipped)
    for setting, setting_pairs in pairs.items():
        s = _Setting(setting_pairs[0][0].run_dir, prompts_n=num_prompts, split=split, noise_seed=noise_seed,
                     which=which, device=device, batch_size=batch_size, world_settings=world_settings)
        rewards = setting_pairs[0][0].rewards
        judge_names = tuple(judges) if judges is not None else tuple(getattr(getattr(s.base.world, "settings", None),
                                                                             "judges", ()))
        metrics = tuple(dict.fromkeys((*rewards, *judge_names)))
        spec = spec_hash(s.spec)
        can_judge = pairwise and getattr(s.base.world, "pairwise_available", hasattr(s.base.world, "prefer"))
        m = min(pairwise_prompts or len(s.prompts), len(s.prompts))
        pair_spec = spec_hash({**s.spec, "pairwise_prompts": m})

        def scores_of(key: str, run_dir: Path, base: bool = False):
            missing, images = [name for name in metrics if cache.load(key, name, spec) is None], None
            if missing:
                images, result.sampled = s.images(run_dir, base), result.sampled + 1
                for name in missing:
                    cache.save(key, name, spec, {"run": str(run_dir), "base": base, **s.score(name, images)})
                    result.scored += 1
            means = {name: cache.load(key, name, spec)["mean"] for name in metrics}
            return {k: math.nan if v is None else v for k, v in means.items()}, images  # JSON keeps NaN as null

        runs, bases, pair_bases, verdicts, rows = {}, {}, [], [], []
        for a, b in setting_pairs:
            bk = base_key(a.run_dir)
            if base_key(b.run_dir) != bk:
                raise ValueError(f"{a.run_dir} and {b.run_dir} are paired but start from different base models")
            if bk not in bases:
                bases[bk] = scores_of(bk, a.run_dir, base=True)[0]
            pair_bases.append(bases[bk])
            ka, kb = (file_sha256(i.run_dir / "checkpoint.pt") for i in (a, b))
            pair_key = f"pair-{ka}-{kb}"
            need_pair = can_judge and cache.load(pair_key, "pairwise", pair_spec) is None
            runs[str(a.run_dir)], ia = scores_of(ka, a.run_dir)
            runs[str(b.run_dir)], ib = scores_of(kb, b.run_dir)
            if need_pair:
                result.sampled += (ia is None) + (ib is None)
                ia = s.images(a.run_dir) if ia is None else ia
                ib = s.images(b.run_dir) if ib is None else ib
                p = s.prompts[:m]
                first = s.base.world.prefer(ia[:m], ib[:m], p)
                second = s.base.world.prefer(ib[:m], ia[:m], p)
                cache.save(pair_key, "pairwise", pair_spec, {"verdicts": [
                    [None if x is None else int(x), None if y is None else -int(y)] for x, y in zip(first, second)]})
                result.judged += 1
            if can_judge:
                verdicts += [tuple(v) for v in cache.load(pair_key, "pairwise", pair_spec)["verdicts"]]
            rows.append((str(a.run_dir), str(b.run_dir), a.budget, a.seed))
        base = {name: sum(pb[name] for pb in pair_bases) / len(pair_bases) for name in metrics}  # one base: itself
        table = paper_table([(r[0], r[1]) for r in rows], runs, base, rewards, tuple(x for x in metrics
                                                                                    if x not in rewards))
        result.settings[setting] = {"table": table, "pairwise": pairwise_summary(verdicts) if verdicts else None,
                                    "pairs": rows, "base": base, "bases": bases, "runs": runs}
        del s
    if out is not None:
        _write(Path(out), result)
    return result


def _write(out: Path, result: PaperEval) -> None:
    from recast.io import atomic_write_bytes, write_csv, write_json

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "paper_eval.json", {
        "settings": {k: {**v, "pairwise": dataclasses.asdict(v["pairwise"]) if v["pairwise"] else None}
                     for k, v in result.settings.items()},
        "alone": [str(i.run_dir) for i in result.alone], "skipped": [str(p) for p in result.skipped]})
    for setting, v in result.settings.items():
        write_csv(out / f"paper_{setting}.csv", v["table"])
        atomic_write_bytes(out / f"paper_{setting}.md", (markdown(setting, v["table"], v["pairwise"]) + "\n").encode())


def add_parser(sub):
    """Register the `paper-eval` subcommand on an argparse subparsers object."""
    p = sub.add_parser("paper-eval", help="the paper's tables (base, static, ReCAST, wins) and pairwise judge from "
                       "run folders, cached per checkpoint")
    p.add_argument("runs", nargs="+", help="run folders, or folders holding them")
    p.add_argument("--out", required=True, help="folder for paper_eval.json, paper_<setting>.{csv,md} and the cache")
    p.add_argument("--cache", help="score cache folder (default OUT/cache)")
    p.add_argument("--num-prompts", type=int, default=0, help="held-out prompts per policy (0: the split's, once)")
    p.add_argument("--split", default="test", help="prompt split")
    p.add_argument("--noise-seed", type=int, default=0, help="seed of the starting noise every policy shares")
    p.add_argument("--judges", help="comma-separated held-out judges (default: the world's configured judges)")
    p.add_argument("--no-pairwise", action="store_true", help="skip the pairwise judge")
    p.add_argument("--pairwise-prompts", type=int, default=0, help="prompts per pair for the pairwise judge (0: all)")
    p.add_argument("--vlm-endpoint", help="pairwise judge: an OpenAI-compatible endpoint (with --vlm-model)")
    p.add_argument("--vlm-model", help="pairwise judge: the served model name")
    p.add_argument("--which", default="ema", choices=("ema", "params"), help="the weights sampled (equal at "
                   "ema_decay 0, the paper's)")
    p.add_argument("--recast-method", default="recast", help="the config method that is ReCAST")
    p.add_argument("--static-method", default="static", help="the config method that is the static baseline")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--batch-size", type=int, default=16, help="images per sampling and scoring pass")
    return p


def run(args) -> int:
    """The `paper-eval` command: writes the tables and prints them; bad input exits 2 with one line."""
    import sys

    if bool(args.vlm_endpoint) != bool(args.vlm_model):
        print("error: --vlm-endpoint and --vlm-model go together", file=sys.stderr)
        return 2
    settings = {"vlm_judge": {"endpoint": args.vlm_endpoint, "model": args.vlm_model}} if args.vlm_endpoint else None
    try:
        result = evaluate_paper(args.runs, out=args.out, cache_dir=args.cache, num_prompts=args.num_prompts,
                                split=args.split, noise_seed=args.noise_seed,
                                judges=[j for j in args.judges.split(",") if j] if args.judges else None,
                                pairwise=not args.no_pairwise, pairwise_prompts=args.pairwise_prompts,
                                which=args.which, device=args.device, batch_size=args.batch_size,
                                recast=args.recast_method, static=args.static_method, world_settings=settings)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.markdown())
    print(f"\n{result.sampled} policies sampled, {result.scored} scores and {result.judged} pairs computed "
          f"(the rest from the cache); {len(result.alone)} runs without a partner; tables in {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m recast.experiments.paper_scoring RUNS... --out DIR` (the same as `python -m recast paper-eval`)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m recast.experiments")
    add_parser(ap.add_subparsers(dest="command", required=True))
    return run(ap.parse_args(["paper-eval", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    raise SystemExit(main())

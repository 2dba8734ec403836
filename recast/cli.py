"""Command line of the ReCAST trainer.

    python -m recast train --preset cpu --setting compose --method recast --lam 0.4,0.15,0.15,0.15,0.15 --out runs/x
    python -m recast demo                  # ReCAST vs static, compose, cpu preset, seeds 0,1,2 (recast/experiments/demo.py)
    python -m recast profile --proposal renderings --out P.npz    # the density ratios the paper's W is built from
    python -m recast weights P.npz --lam 2,1,1,1,1 --out T.npz    # the weight table for budgets λ (weights_cli.py)
    python -m recast profile --setting compose --estimator rollout   # when is each reward informative (profile.py)
    python -m recast paper-eval runs/paper --out runs/paper_eval     # the paper's tables from runs (paper_eval.py, paper_scoring.py)
    python -m recast tiny-sd3 runs/tiny_sd3   # tiny SD3 pipeline and reward folders for the paper-scale commands

Every command runs torch on one CPU thread unless told otherwise (`--set num_threads=N` for train, `--num-threads N`
for profile, `--workers` for the demo's parallel runs): several processes on a shared machine each taking every core
run many times slower than one thread each.

Bad input exits with status 2 and a one-line message saying what to fix (no traceback).
"""

from __future__ import annotations

import argparse
import sys

from recast.runargs import add_train_arguments, config_from_args, floats as _floats, list_option as _list_option


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    ap = argparse.ArgumentParser(prog="python -m recast", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    add_train_arguments(sub.add_parser("train", help="run (or resume) online RL training"))
    e = sub.add_parser("export", help="write a run's trained LoRA adapter in diffusers' format (pipe.load_lora_weights)")
    e.add_argument("run_dir", help="a run directory (its checkpoint.pt)")
    e.add_argument("out_dir", help="an empty or new folder for pytorch_lora_weights.safetensors")
    e.add_argument("--which", default="ema", choices=("ema", "raw"), help="the EMA of the weights (what evaluations "
                   "sample) or the raw trained weights")
    d = sub.add_parser("demo", help="the paper's ReCAST vs its static baseline (and other methods), same seeds; summary "
                       "and paired tables, a figure")
    d.add_argument("--preset", default="cpu", help="ci | cpu (= paper) | reading | gpu")
    d.add_argument("--setting", default="compose", help="compose | quality")
    d.add_argument("--lam", type=_floats, default=(), help="budgets (default: the setting's; equal in compose, "
                   "sharpness-heavy in quality)")
    d.add_argument("--methods", default="recast,static",
                   help="comma-separated methods to compare, the first against each other, e.g. "
                        "recast,static,recast_live,uniform")
    d.add_argument("--seeds", default="0,1,2", help="comma-separated seeds; every method runs every seed")
    d.add_argument("--iterations", type=int, help="override the preset's iterations")
    d.add_argument("--workers", type=int, help="parallel training processes (default: CPU count)")
    d.add_argument("--out", default="runs/demo", help="folder for the runs and results.{json,csv}")
    d.add_argument("--overwrite", action="store_true", help="retrain runs in --out made with other settings (finished "
                   "runs of these settings are reused, killed ones continue)")
    d.add_argument("--figure", default=None, help="figure name, written beside the results (default: demo_<setting>)")
    from recast.experiments import profile, tiny_sd3
    from recast.experiments.weights_cli import add_weights_parser

    p = profile.add_parser(sub)
    p.add_argument("--num-threads", type=int, default=1, help="torch CPU threads (default 1; 0 keeps torch's "
                   "default, every core)")
    tiny_sd3.add_parser(sub)
    add_weights_parser(sub)
    from recast.experiments import paper_scoring

    paper_scoring.add_parser(sub)
    return ap


def _demo(args: argparse.Namespace) -> int:
    from recast.experiments.demo import run_demo

    try:
        result = run_demo(args.out, preset_name=args.preset, setting=args.setting, lam=args.lam,
                          methods=_list_option("--methods", args.methods),
                          seeds=_list_option("--seeds", args.seeds, int), iterations=args.iterations,
                          workers=args.workers, figure_name=args.figure or f"demo_{args.setting}",
                          overwrite=args.overwrite)
    except (ValueError, OSError, TypeError) as err:  # OSError: FileNotFound/FileExists/Permission, a full disk
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.markdown())
    print(f"\n{len(result.runs)} methods x {len(next(iter(result.runs.values())))} seeds in "
          f"{result.wall_time_s:.0f} s; summary in {result.out_dir}/results.json")
    return 0



def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m recast` and the `recast` script."""
    try:
        return _main(argv)
    except ModuleNotFoundError as err:
        from recast.extras import EXTRAS, pip_hint

        top = (err.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        print(f"error: this command needs {top!r}, which the core install leaves out: {pip_hint(EXTRAS[top])} "
              f"(or {pip_hint('all')} for every command)", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "export":
        from recast.trainer.adapters import export_adapter

        try:
            path = export_adapter(args.run_dir, args.out_dir, args.which)
        except (ValueError, OSError) as err:  # OSError: FileNotFound/FileExists/Permission, a full disk
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"wrote the {args.which} adapter of {args.run_dir} to {path} (pipe.load_lora_weights({str(path)!r}))")
        return 0
    if args.command == "profile":
        from recast.experiments import profile

        if args.num_threads < 0:
            print(f"error: --num-threads must be >= 0, got {args.num_threads}", file=sys.stderr)
            return 2
        if args.num_threads:
            import torch

            torch.set_num_threads(args.num_threads)
        return profile.run(args)
    if args.command == "weights":
        from recast.experiments.weights_cli import run_weights

        return run_weights(args)
    if args.command == "tiny-sd3":
        from recast.experiments import tiny_sd3

        return tiny_sd3.run(args)
    if args.command == "paper-eval":
        from recast.experiments import paper_scoring

        return paper_scoring.run(args)
    from recast.trainer.rundir import EXIT_BUSY, RunDirBusyError

    try:
        if args.resume and args.auto:
            raise ValueError("--resume and --auto overlap: --auto already resumes a compatible run; pass one")
        cfg = config_from_args(args)
        from recast.trainer import NonFiniteLossError, Trainer, TrainingStopped
        from recast.trainer.stopping import exit_status

        trainer = Trainer(cfg, args.out, resume="auto" if args.auto else args.resume, overwrite=args.overwrite,
                          change_processes=args.change_processes)
    except RunDirBusyError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BUSY
    except (ValueError, FileNotFoundError, FileExistsError, PermissionError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, an unreadable file: one line naming it, not a traceback
        print(f"error: {err.strerror or err} ({err.filename or args.out})", file=sys.stderr)
        return 2
    if trainer.mode == "finished":
        trainer.release()
        print(f"done: {args.out} already holds this run, finished; nothing to train")
        return 0
    try:
        run = trainer.run()
    except TrainingStopped as err:
        print(f"stopped: {err}", file=sys.stderr)
        return exit_status(err.signum)
    except NonFiniteLossError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except OSError as err:
        print(f"error: cannot write {err.filename or args.out}: {err.strerror or err}; the last checkpoint is intact, "
              "rerun with --resume once there is room", file=sys.stderr)
        return 2
    last = run.metrics[-1] if run.metrics else {}
    print(f"done: {len(run.metrics)} iterations in {args.out}; last weighted reward "
          f"{last.get('reward/weighted', float('nan')):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

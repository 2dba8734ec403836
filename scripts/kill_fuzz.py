"""Kill-and-resume fuzzing: SIGKILL training runs at random points, resume them, and demand bit-exact results.

    PYTHONPATH=$PWD python scripts/kill_fuzz.py --trials 40 --out /tmp/kill_fuzz      # both backends
    PYTHONPATH=$PWD python scripts/kill_fuzz.py --budget-s 600 --backends grpo

Each trial trains `--preset ci` (6 iterations; checkpoint_every 1 or 2, eval_every 0 or 2) in a child process and
kills it with SIGKILL at one of these points, drawn at random:
    timer             after a random delay, wherever the run is
    metrics_torn      inside the metrics append, after half of the n-th line is written (a torn line)
    after_metrics     right after the n-th metrics line is complete (the issue's report)
    ckpt_before_rename / ckpt_after_rename
                      inside the checkpoint write: temp file written, just before / after the rename
    eval_append       inside the evaluation append
The child installs these kill points by monkeypatching `recast.io.append_jsonl` and `os.replace` before the trainer
is imported, so the library carries no test hooks. The run is then resumed (`--resume`; a fresh start with
`--overwrite` when no checkpoint was written yet), sometimes killed again by a timer, and resumed until it finishes.
A trial passes when metrics.jsonl (without the time/ fields), weights.jsonl and eval.jsonl equal those of an
uninterrupted run line for line, the final checkpoint's parameters, old policy, EMA, optimiser state and W are
bit-identical, and no temp file is left behind. Prints one line per trial and a summary per backend.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("timer", "metrics_torn", "after_metrics", "ckpt_before_rename", "ckpt_after_rename", "eval_append")


# ---------------------------------------------------------------------------------------------------------- child
def _install_fault(kind: str, n: int) -> None:
    """Patch recast.io / os so that the process SIGKILLs itself at the n-th occurrence of `kind`."""
    import recast.io as rio

    count = {"n": 0}

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def hit() -> bool:
        count["n"] += 1
        return count["n"] == n

    if kind in ("metrics_torn", "after_metrics", "eval_append"):
        original = rio.append_jsonl
        target = "eval.jsonl" if kind == "eval_append" else "metrics.jsonl"

        def append_jsonl(path, record):
            if Path(path).name == target and hit():
                if kind == "metrics_torn":
                    line = json.dumps(rio.to_jsonable(record)) + "\n"
                    with open(path, "a") as fh:
                        fh.write(line[: len(line) // 2])
                        fh.flush()
                    die()
                original(path, record)
                die()
            original(path, record)

        rio.append_jsonl = append_jsonl
    elif kind in ("ckpt_before_rename", "ckpt_after_rename"):
        real_replace = os.replace

        def replace(src, dst, *a, **kw):
            if str(dst).endswith("checkpoint.pt") and hit():
                if kind == "ckpt_before_rename":
                    die()
                real_replace(src, dst, *a, **kw)
                die()
            return real_replace(src, dst, *a, **kw)

        os.replace = replace


def child(argv: list[str]) -> int:
    fault = argv[0]
    if fault != "none":
        kind, n = fault.split(":")
        _install_fault(kind, int(n))
    from recast.cli import main  # imported after patching, so `from recast.io import ...` sees the patches

    return main(argv[1:])


# --------------------------------------------------------------------------------------------------------- parent
def _train(args: list[str], fault: str = "none", kill_after: float | None = None) -> tuple[int, str]:
    """Run one child; returns (exit code, stderr tail). A negative code is the signal that ended it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", fault, "train", *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
    return proc.returncode, (err or "")[-400:]


def _records(run: Path, name: str) -> list[dict]:
    path = run / name
    if not path.is_file():
        return []
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in path.read_text().splitlines()]


def _final_state(run: Path) -> dict:
    import torch

    state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    return {"policy": state["policy"], "optimizer": state["optimizer"]["state"], "W": state["W"],
            "iteration": state["iteration"]}


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def compare(ref: Path, run: Path) -> str | None:
    """None when `run` equals the uninterrupted `ref` bit for bit; else what differs."""
    for name in ("metrics.jsonl", "weights.jsonl", "eval.jsonl"):
        a, b = _records(ref, name), _records(run, name)
        if a != b:
            its = [r.get("iteration") for r in b]
            return f"{name} differs ({len(a)} vs {len(b)} records, iterations {its})"
    if not _same(_final_state(ref), _final_state(run)):
        return "final checkpoint differs"
    temps = [p.name for p in run.glob(".*.tmp")]
    if temps:
        return f"temp files left: {temps}"
    return None


def trial(rng: random.Random, out: Path, refs: dict, backend: str, index: int,
          seeds: tuple[int, ...] = (3,)) -> tuple[bool | None, str]:
    """One kill-and-resume trial; (True, label) passed, (False, why) failed, (None, label) never killed."""
    # Few (seed, schedule) combinations, so that uninterrupted reference runs are shared between trials.
    seed, every, eval_every = rng.choice(seeds), rng.choice([1, 2]), rng.choice([0, 2])
    args = ["--preset", "ci", "--backend", backend, "--seed", str(seed), "--iterations", "6",
            "--set", f"checkpoint_every={every}", "--set", f"eval_every={eval_every}"]
    key = (backend, seed, every, eval_every)
    if key not in refs:
        ref = out / f"ref_{backend}_{seed}_{every}_{eval_every}"
        shutil.rmtree(ref, ignore_errors=True)
        t0 = time.perf_counter()
        code, err = _train(args + ["--out", str(ref)])
        if code != 0:
            raise RuntimeError(f"reference run failed ({code}): {err}")
        refs[key] = (ref, time.perf_counter() - t0)
    ref, wall = refs[key]
    run = out / f"trial_{index:03d}"
    shutil.rmtree(run, ignore_errors=True)
    kind = rng.choice(KINDS)
    if kind == "timer":
        fault, kill_after = "none", rng.uniform(0.3, wall)
        what = f"timer {kill_after:.1f}s"
    else:
        limit = {"eval_append": 2 if eval_every else 1, "ckpt_before_rename": 6 // every,
                 "ckpt_after_rename": 6 // every}.get(kind, 6)
        n = rng.randint(1, limit)
        fault, kill_after, what = f"{kind}:{n}", None, f"{kind} #{n}"
    code, err = _train(args + ["--out", str(run)], fault, kill_after)
    kills = [what] if code == -signal.SIGKILL else []
    for attempt in range(6):  # resume until done, sometimes killed again
        if code == 0:
            break
        if code not in (-signal.SIGKILL,):
            return False, f"{what}: run exited {code}: {err.strip().splitlines()[-1] if err.strip() else ''}"
        extra = rng.uniform(0.3, wall) if attempt == 0 and rng.random() < 0.3 else None
        if (run / "checkpoint.pt").is_file():
            code, err = _train(args + ["--out", str(run), "--resume"], kill_after=extra)
        else:
            code, err = _train(args + ["--out", str(run), "--overwrite"], kill_after=extra)
        if code == -signal.SIGKILL:
            kills.append(f"timer {extra:.1f}s")
    if code != 0:
        return False, f"{what}: did not finish ({code}) {err[-200:]}"
    label = f"{backend} seed={seed} checkpoint_every={every} eval_every={eval_every} kills=[{', '.join(kills)}]"
    if not kills:  # the timer fired after the run had finished: nothing was tested
        shutil.rmtree(run, ignore_errors=True)
        return None, label
    diff = compare(ref, run)
    if diff is None:
        shutil.rmtree(run, ignore_errors=True)
        return True, label
    return False, f"{label}: {diff}"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        return child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per backend (stops early at --budget-s)")
    ap.add_argument("--backends", default="nft,grpo")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="stop starting trials after this long")
    ap.add_argument("--seed", type=int, default=0, help="seeds the fuzzer's own choices")
    ap.add_argument("--run-seeds", default="3", help="training seeds to draw from (3 is the issue's report)")
    ap.add_argument("--out", default="/tmp/recast_kill_fuzz")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng, refs, start = random.Random(args.seed), {}, time.perf_counter()
    backends = [b for b in args.backends.split(",") if b]
    tally = {b: [0, 0, 0] for b in backends}
    for i in range(args.trials * len(backends)):
        if time.perf_counter() - start > args.budget_s:
            break
        backend = backends[i % len(backends)]
        ok, msg = trial(rng, out, refs, backend, i, tuple(int(s) for s in args.run_seeds.split(",")))
        tally[backend][{True: 0, False: 1, None: 2}[ok]] += 1
        print(f"[{i:3d}] {({True: 'PASS', False: 'FAIL', None: 'NOKILL'})[ok]} {msg}", flush=True)
    for b, (ok, bad, unkilled) in tally.items():
        print(f"{b}: {ok} passed, {bad} failed of {ok + bad} killed trials ({unkilled} finished before the kill)")
    print(f"wall {time.perf_counter() - start:.0f} s")
    return 0 if all(bad == 0 for _, bad, _ in tally.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

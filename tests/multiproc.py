"""Real multi-process training for the tests: `launch(...)` starts `python -m torch.distributed.run` (torchrun) with
this file as each process's script; every process trains through `recast.trainer.Trainer` (gloo on CPU, as under
`accelerate launch --multi_gpu`) and writes what it saw to ``DUMP/rank<r>.pt``.

The child watches the trainer from outside, the way scripts/kill_fuzz.py does, so the library carries no test hooks:
it wraps `Trainer.rollout` (the prompts each process drew), `Trainer._informativeness` (whether its drawn columns left
it any x̂_0) and the backends (each process's own loss parts), and with ``--kill-after-checkpoint N`` SIGKILLs
itself right after the N-th checkpoint is renamed into place (only the main process writes one). With
``--sigterm-rank R --sigterm-at N`` process R sends itself SIGTERM during its N-th iteration (after its rollout),
and a process whose run stops on it writes ``DUMP/stopped<r>.json`` and exits 143.

    child:  python tests/multiproc.py DUMP [--kill-after-checkpoint N] [--sigterm-rank R --sigterm-at N]
                                           [--change-processes] -- TRAIN ARGS...
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch(dump: Path, train_args: list[str], *, processes: int = 2, kill_after_checkpoint: int = 0,
           change_processes: bool = False, sigterm: tuple[int, int] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """Run this file under torchrun on ``processes`` CPU processes; returns the finished launcher's result."""
    with socket.socket() as s:  # a free port for the rendezvous (two launches in one test must not collide)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = (["--kill-after-checkpoint", str(kill_after_checkpoint)] if kill_after_checkpoint else []) + (
        ["--change-processes"] if change_processes else []) + (
        ["--sigterm-rank", str(sigterm[0]), "--sigterm-at", str(sigterm[1])] if sigterm else [])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(processes),
           "--master_addr", "127.0.0.1", "--master_port", str(port), __file__, str(dump), *extra, "--", *train_args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _child(argv: list[str]) -> int:
    import torch

    import recast.trainer.backends as backends
    import recast.trainer.loop as loop
    from recast.runargs import config_from_args, train_parser
    from recast.trainer.sharding import full_tensor

    dump, rest = Path(argv[0]), argv[1:]
    cut = rest.index("--")
    opts, train_args = rest[:cut], rest[cut + 1:]
    kill_after = int(opts[opts.index("--kill-after-checkpoint") + 1]) if "--kill-after-checkpoint" in opts else 0
    sigterm_at = int(opts[opts.index("--sigterm-at") + 1]) if "--sigterm-at" in opts else 0
    sigterm_me = sigterm_at and int(opts[opts.index("--sigterm-rank") + 1]) == int(os.environ.get("RANK", "0"))
    seen = {"prompts": [], "had_proxies": [], "parts": []}

    if kill_after:
        real_replace, count = os.replace, {"n": 0}

        def replace(src, dst, *a, **kw):
            out = real_replace(src, dst, *a, **kw)
            if str(dst).endswith("checkpoint.pt"):
                count["n"] += 1
                if count["n"] == kill_after:
                    sys.stdout.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
            return out

        os.replace = replace

    rollout, informativeness = loop.Trainer.rollout, loop.Trainer._informativeness

    def watched_rollout(self):
        ro = rollout(self)
        seen["prompts"].append(list(ro.prompts))
        if sigterm_me and len(seen["prompts"]) == sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return ro

    def watched_informativeness(self, out, prompts, info_mask):
        seen["had_proxies"].append(out.proxy_x0 is not None)
        return informativeness(self, out, prompts, info_mask)

    def watched(fn):
        def run(*args, **kwargs):
            out = fn(*args, **kwargs)
            seen["parts"].append(dict(out.parts))
            return out
        return run

    loop.Trainer.rollout, loop.Trainer._informativeness = watched_rollout, watched_informativeness
    loop.nft_optimise, loop.grpo_optimise = watched(backends.nft_optimise), watched(backends.grpo_optimise)

    args = train_parser().parse_args(train_args)
    trainer = loop.Trainer(config_from_args(args), args.out, resume="auto" if args.auto else args.resume,
                           change_processes="--change-processes" in opts)
    rank = trainer.acc.process_index
    try:
        trainer.run()
    except loop.TrainingStopped as err:
        (dump / f"stopped{rank}.json").write_text(json.dumps({"iteration": err.iteration, "signum": err.signum}))
        return 128 + err.signum
    pol = trainer.policy

    def whole(ts):  # a sharded run's tensors gathered whole (every process joins), its local pieces beside them
        return [full_tensor(t.detach()).cpu().clone() for t in ts]

    local = [t.to_local().detach().cpu().clone() for t in pol.params] if trainer.sharded else None
    torch.save({"rank": rank, "num_processes": trainer.acc.num_processes, "iteration": trainer.iteration,
                "params": whole(pol.params), "old": whole(pol.old), "ema": whole(pol.ema), "local_params": local,
                "sharded": trainer.sharded, "W": trainer.W, "D": trainer.D, **seen}, dump / f"rank{rank}.pt")
    print(json.dumps({"rank": rank, "done": trainer.iteration}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))

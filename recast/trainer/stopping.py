"""A stopped run is never lost: SIGINT (Ctrl-C, JupyterLab's interrupt) and SIGTERM (a scheduler's kill, `kill PID`)
let the current iteration finish, the trainer writes a checkpoint, and `TrainingStopped` says how to continue.

A second signal while the first is being honoured stops at once (Python's own KeyboardInterrupt); the last
checkpoint on disk is then intact, because every checkpoint is written atomically.

With several processes the stop is agreed every iteration (one all-reduce of a flag), so every process stops after
the same iteration and joins the same checkpoint, whichever of them the signal reached.
"""

from __future__ import annotations

import signal
import sys
import threading

__all__ = ["TrainingStopped", "StopRequests", "exit_status"]

_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


class TrainingStopped(KeyboardInterrupt):
    """A run stopped on a signal after a completed iteration, with its checkpoint written.

    A KeyboardInterrupt, so a notebook cell or a script stops as on any interrupt, and an ``except Exception`` does
    not swallow it.

    Attributes:
        iteration: the last completed (and checkpointed) iteration.
        iterations: the run's planned iterations.
        signum: the signal that asked for the stop.
        out: the run directory.
    """

    def __init__(self, iteration: int, iterations: int, signum: int, out):
        self.iteration, self.iterations, self.signum, self.out = iteration, iterations, signum, out
        what = (f"checkpoint written at iteration {iteration} of {iterations}" if iteration else
                "nothing trained yet, so nothing to checkpoint")
        super().__init__(f"stopped on {_NAMES.get(signum, signum)} after iteration {iteration} of {iterations} "
                         f"({what}) in {out}; continue it with the same command plus --auto (recast train), "
                         "resume='auto' (recast.trainer.train) or resume=True")


class StopRequests:
    """Catch SIGINT and SIGTERM while a run trains; `requested` is the first signal caught (0: none).

    Used as a context manager around the training loop; the previous handlers come back on exit. Outside the main
    thread (where Python cannot install handlers) it catches nothing and the signals keep their usual effect.
    """

    def __init__(self, announce: bool = True):
        self.requested = 0
        self.announce = announce
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame):
        if self.requested:  # the second signal: stop now, as Python would have on the first
            self._restore()
            raise KeyboardInterrupt(f"second {_NAMES.get(signum, signum)}: stopped at once; the last checkpoint on "
                                    "disk is intact")
        self.requested = signum
        if self.announce:
            print(f"\n{_NAMES.get(signum, signum)} received: finishing this iteration, then writing a checkpoint "
                  "(signal again to stop at once)", file=sys.stderr, flush=True)

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():
            for sig in _NAMES:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by `signum` (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)

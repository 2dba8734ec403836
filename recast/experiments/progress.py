"""Progress of training runs that other processes train, read from their run directories.

The demo's runs train in worker processes with their own progress bars off (several bars from several processes
garble one terminal). `RunProgress` watches each run's ``metrics.jsonl``, which the trainer appends one line to per
finished iteration, and prints one line whenever a run gets further:

    [demo] recast/seed_0: iteration 12/30 (6.8 s/iteration)

A resumed run's first line says where it continues from.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

__all__ = ["RunProgress", "finished_iterations"]


def finished_iterations(run_dir: str | Path) -> int:
    """The iterations ``run_dir/metrics.jsonl`` records as finished (complete lines only; 0 without the file)."""
    try:
        data = (Path(run_dir) / "metrics.jsonl").read_bytes()
    except OSError:
        return 0
    return data.count(b"\n")


class RunProgress:
    """Watch run directories and report each run's finished iterations.

    Args:
        runs: label -> run directory (the directories may not exist yet).
        iterations: the iterations each run trains (one number for all, or label -> number).
        prefix: put before every line.
        stream: where lines go (default: stderr, so the results on stdout stay clean).
        clock: seconds, for the per-iteration time (tests pass a fake).
    """

    def __init__(self, runs: dict[str, str | Path], iterations: int | dict[str, int], *, prefix: str = "[demo]",
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.runs = {label: Path(p) for label, p in runs.items()}
        self.iterations = iterations
        self.prefix = prefix
        self.stream = stream
        self.clock = clock
        self._seen = {label: finished_iterations(p) for label, p in self.runs.items()}
        self._last: dict[str, float | None] = dict.fromkeys(self.runs)  # when a run's count last rose (None: not yet)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> list[str]:
        """Read every run once; print and return one line per iteration finished since the last poll.

        The time per iteration is shown once a run has been seen to move twice (the first interval would include the
        worker's start); a run that had iterations before it moved says where it continued from.
        """
        lines, now = [], self.clock()
        for label, path in self.runs.items():
            n, seen = finished_iterations(path), self._seen[label]
            if n < seen:  # a resume rewound its logs to the last checkpoint
                self._seen[label], self._last[label] = n, None
                continue
            if n == seen:
                continue
            last = self._last[label]
            rate = f" ({(now - last) / (n - seen):.1f} s/iteration)" if last is not None else ""
            for i in range(seen + 1, n + 1):
                note = f" (continued from iteration {seen})" if i == seen + 1 and seen and last is None else ""
                total = self.iterations[label] if isinstance(self.iterations, dict) else self.iterations
                lines.append(f"{self.prefix} {label}: iteration {i}/{total}{rate}{note}")
            self._seen[label], self._last[label] = n, now
        out = self.stream or sys.stderr
        for line in lines:
            print(line, file=out, flush=True)
        return lines

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.poll()

    def __enter__(self) -> "RunProgress":
        self._thread = threading.Thread(target=self._loop, args=(1.0,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()  # the iterations finished since the last look, also when stopped by Ctrl-C or an error

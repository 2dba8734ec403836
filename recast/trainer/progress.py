"""A training run's progress, in the form its reader can see.

- in a terminal: tqdm's bar, as before (``recast train``);
- in JupyterLab or Jupyter Notebook (a kernel a Jupyter server started, which sets ``JPY_SESSION_NAME``): tqdm's
  notebook widget;
- in any other kernel (papermill, nbmake, nbclient) and wherever stderr is not a terminal (a batch job's log): one
  line per finished iteration on stderr, which ``papermill --log-output`` and a log file show as they come::

      [train] recast/nft: iteration 3/30 (4.1 s/iteration, reward 0.512, loss 0.0312)

``RECAST_PROGRESS=bar|widget|lines|off`` chooses one by hand.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

from recast.kernel import in_kernel as in_kernel_

__all__ = ["progress_style", "IterationProgress", "STYLES"]

STYLES = ("bar", "widget", "lines", "off")


def progress_style(environ=None, *, in_kernel: bool | None = None, stream: TextIO | None = None) -> str:
    """Which progress this process shows: "bar", "widget", "lines" or "off" (see the module docstring).

    Raises:
        ValueError: ``RECAST_PROGRESS`` is set to something else.
    """
    env = os.environ if environ is None else environ
    chosen = env.get("RECAST_PROGRESS", "").strip().lower()
    if chosen:
        if chosen not in STYLES:
            raise ValueError(f"RECAST_PROGRESS={chosen!r}: expected one of {', '.join(STYLES)}")
        return chosen
    if in_kernel_() if in_kernel is None else in_kernel:
        return "widget" if env.get("JPY_SESSION_NAME") else "lines"
    stream = sys.stderr if stream is None else stream
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


class IterationProgress:
    """Report a run's iterations ``initial + 1 … total`` as they finish.

    Args:
        initial: iterations already done (a resumed run).
        total: the run's iterations.
        desc: the run's label (method/backend).
        enabled: False shows nothing (progress off, or not the main process).
        style: "bar" | "widget" | "lines" | "off"; default `progress_style()`.
        stream: where lines go (default stderr).
        clock: seconds, for the per-iteration time (tests pass a fake).
    """

    def __init__(self, *, initial: int, total: int, desc: str, enabled: bool = True, style: str | None = None,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.style = (style or progress_style()) if enabled else "off"
        if self.style not in STYLES:
            raise ValueError(f"progress style {self.style!r}: expected one of {', '.join(STYLES)}")
        self.n, self.total, self.desc = initial, total, desc
        self.stream, self.clock = stream, clock
        self._last = clock()
        self._bar = None
        if self.style in ("bar", "widget"):
            if self.style == "widget":
                from tqdm.notebook import tqdm
            else:
                from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, desc=desc)
        elif self.style == "lines" and initial:
            self._say(f"[train] {desc}: continuing from iteration {initial}/{total}")

    def _say(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

    def update(self, **postfix) -> str | None:
        """One more iteration finished, with the numbers to show beside it; returns the line printed, if any."""
        self.n += 1
        now, last = self.clock(), self._last
        self._last = now
        if self._bar is not None:
            self._bar.set_postfix(**postfix, refresh=False)
            self._bar.update(1)
            return None
        if self.style != "lines":
            return None
        extra = "".join(f", {k} {v}" for k, v in postfix.items())
        line = f"[train] {self.desc}: iteration {self.n}/{self.total} ({now - last:.1f} s/iteration{extra})"
        self._say(line)
        return line

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

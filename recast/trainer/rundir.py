"""One run per directory: an advisory lock on `<run>/.recast.lock`, held for the life of a run.

The lock is `fcntl.flock` on an open file, so the kernel drops it the moment its process exits, however it exits
(`kill -9` included): a stale lock file from a killed run never blocks the next one. The holder writes its pid into
the file so that a refused run can say who holds the directory.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "RunDirBusyError", "RunLock"]

LOCK_FILE = ".recast.lock"


class RunDirBusyError(FileExistsError):
    """Another live process holds the run directory's lock."""


class RunLock:
    """An exclusive, non-blocking lock on a run directory.

    Use `RunLock(path).acquire()` (or `with RunLock(path):`), and `release()` when the run ends; the lock is also
    released when the object is garbage-collected or the process dies.

    Raises:
        RunDirBusyError: from `acquire`, naming the holder's pid, when another process holds the directory.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        if self._fd is not None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirBusyError(f"{self.path.parent} is in use by another run (pid {holder}); wait for it to finish, "
                                  "stop it, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        self.release()

"""Every file a run or a notebook writes leaves through here: JSON, JSONL, CSV, figures, torch and safetensors
files, and whole folders.

One writer, `atomic_write`: the bytes go to a temp file in the target's folder, are flushed to disk, and the temp file
is renamed over the target, so a crash never leaves half a file. A target that is a symbolic link, a folder, a named
pipe or anything else but a regular file is refused with one line naming it: nothing is ever written through a link.
Folders written by other libraries (`save_pretrained`) are made in a fresh temp folder and renamed into place
(`atomic_dir`). Reads of run files open regular files only (`open_regular`), so a named pipe never blocks a reader.
"""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable

import numpy as np
import torch

__all__ = ["to_jsonable", "current_umask", "NotRegularFileError", "check_target", "atomic_write", "atomic_write_bytes",
           "atomic_dir", "save_torch", "save_safetensors", "open_regular", "read_bytes", "write_json", "read_json",
           "append_jsonl", "read_jsonl", "write_csv", "remove_stale_temps"]


class NotRegularFileError(FileExistsError):
    """A path that recast reads or writes is a link, folder, named pipe or device where a regular file belongs (a
    FileExistsError: something is in the way, and every command reports it in one line)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe "
                       "(FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_target(path: str | os.PathLike) -> Path:
    """`path` as a Path if it is absent or a regular file (not a link to one); else NotRegularFileError naming it."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except NotADirectoryError:  # a file where one of its folders belongs
        blocker = next(p for p in path.parents if p.exists() and not p.is_dir())
        raise NotRegularFileError(f"cannot write {path}: {blocker} is a file, not a folder") from None
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{path} is {_kind(mode)}; recast writes only regular files and never through a "
                                  "link: remove it or write elsewhere")
    return path


def _make_parent(path: Path) -> None:
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise NotRegularFileError(f"cannot write {path}: {parent} is a file, not a folder")
    parent.mkdir(parents=True, exist_ok=True)


def to_jsonable(obj: Any) -> Any:
    """Tensors and arrays to nested lists, numpy scalars to Python, non-finite floats to None (strict JSON)."""
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()] if obj.ndim else to_jsonable(obj.item())
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> Path:
    """The package's one file writer: `write(fh)` fills a temp file in `path`'s folder, which is flushed to disk and
    renamed over `path`. Never a half-written file, never a write through a link.

    Args:
        path: the target; its folder is created if missing.
        write: called with the temp file open for binary writing (``fig.savefig(fh, format="png")``,
            ``torch.save(obj, fh)``, ``fh.write(data)``).

    Raises:
        NotRegularFileError: `path` is a symbolic link, a folder, a named pipe or another non-regular file
            (checked before `write` runs and again before the rename; nothing is written).
        NotRegularFileError: also when `path`'s folder is a file.
    """
    path = check_target(path)
    _make_parent(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes private (0600) files; give the mode open() would have
        check_target(path)  # os.replace would replace a link made meanwhile, never write through it; say so instead
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` with `atomic_write`."""
    return atomic_write(path, lambda fh: fh.write(data))


def save_torch(path: str | os.PathLike, obj: Any) -> Path:
    """`torch.save(obj)` to `path` with `atomic_write`."""
    return atomic_write(path, lambda fh: torch.save(obj, fh))


def save_safetensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict | None = None) -> Path:
    """A safetensors file of `tensors` (and string `metadata`) at `path` with `atomic_write`."""
    from safetensors.torch import save

    return atomic_write(path, lambda fh: fh.write(save(tensors, metadata=metadata)))


def atomic_dir(final: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """A folder written by `write(tmp)` into a fresh temp folder beside `final`, then renamed into place, replacing
    what `final` held (a link at `final` is removed as a link, never followed): never half a folder.

    Raises:
        NotRegularFileError: `final` is a file, named pipe or other non-folder (nothing is written).
    """
    final = Path(final)
    if final.exists() and not final.is_symlink() and not final.is_dir():
        raise NotRegularFileError(f"{final} is a file, not a folder; remove it or write elsewhere")
    _make_parent(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write(tmp)
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes a private (0700) folder; give the mode mkdir would have
        old = final.with_name(f".{final.name}-old-{os.getpid()}")
        if final.is_symlink():
            final.unlink()
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def open_regular(path: str | os.PathLike) -> IO[bytes]:
    """`path` opened for binary reading if it is a regular file (a link to one is followed). A named pipe is opened
    without blocking and refused, so a reader never waits on one.

    Raises:
        FileNotFoundError: no such file. NotRegularFileError: a folder, named pipe, socket or device.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(f"{path} is {_kind(mode)}, not a regular file; recast reads only regular files")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike, limit: int | None = None, what: str = "file") -> bytes:
    """A regular file's bytes (`open_regular`), refusing one larger than `limit` bytes before reading it whole.

    Raises:
        ValueError: the file is larger than `limit` (naming it and the limit).
    """
    with open_regular(path) as fh:
        data = fh.read(-1 if limit is None else limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path}: larger than {limit:,} bytes, too large for a {what}")
    return data


def writable_folder(path: str | os.PathLike, what: str) -> Path:
    """The folder `path`, created if missing, checked writable by this process (before any compute that fills it).

    Args:
        what: how messages name it, e.g. ``"notebook parameter out_dir: /x"``.

    Raises:
        FileExistsError: `path` is a file. PermissionError: it cannot be created, or this process cannot write there.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{what} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(f"{what} cannot be created ({err.strerror or err})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise PermissionError(f"{what} is not writable")
    return out


def current_umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write `obj` as indented JSON."""
    return atomic_write_bytes(path, (json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n").encode())


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file.

    Raises:
        ValueError: the file is not valid JSON (the message names the file, line and column).
    """
    data = read_bytes(path)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not a UTF-8 JSON file ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a config or a record (JSON nesting beyond Python's "
                         "recursion limit)") from None


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON record as a line (flushed, so a crash loses at most the line being written); never through a
    link, and only to a regular file (NotRegularFileError otherwise)."""
    path = check_target(path)
    _make_parent(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO):  # a link, or a pipe without a reader, made since the check
            check_target(path)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        check_target(path)
    with os.fdopen(fd, "a") as fh:
        fh.write(json.dumps(to_jsonable(record)) + "\n")
        fh.flush()


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temp files `atomic_write_bytes` leaves when its process is killed mid-write.

    Only call this while holding the folder's run lock: another live writer's temp file looks the same.
    """
    removed = []
    for p in Path(folder).glob(".*.tmp"):
        if p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The JSON-object lines of a log, skipping what is not one: a torn final line left by a crash, or a damaged
    line (not UTF-8, not JSON, or JSON but not an object); a resume restores the log from its checkpoint's copy."""
    records = []
    with open_regular(path) as fh:
        for raw in fh:
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                continue
            if isinstance(rec, dict):
                records.append(rec)
    return records


def write_csv(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Atomically write dict rows as CSV; the header is the union of keys in first-seen order."""
    rows = [to_jsonable(r) for r in rows]
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    import io as _io

    buf = _io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_bytes(path, buf.getvalue().encode())


def read_csv(path: str | os.PathLike) -> list[dict]:
    """Rows of a CSV (as `write_csv` writes them) as dicts, numbers and booleans parsed, empty cells as None."""
    def parse(v: str):
        if v == "":
            return None
        for cast in (int, float):
            try:
                return cast(v)
            except ValueError:
                pass
        return {"True": True, "False": False}.get(v, v)

    import io as _io

    with _io.TextIOWrapper(open_regular(path), newline="") as f:
        return [{k: parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def check_safetensors(path: Path) -> None:
    """Raise ValueError naming `path` unless it is a complete safetensors file (header parses, sizes add up)."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or n > size - 8:
            raise ValueError(f"{path} is truncated or not a safetensors file ({size} bytes)")
        try:
            header = json.loads(fh.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            raise ValueError(f"{path} has a corrupt safetensors header") from None
    if 8 + n + end != size:
        raise ValueError(f"{path} is truncated or padded: {size} bytes, its header describes {8 + n + end}")

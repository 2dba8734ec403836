"""Every file a run or a notebook writes leaves through here: JSON, JSONL, CSV, and atomic byte writes."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

__all__ = ["to_jsonable", "current_umask", "atomic_write_bytes", "write_json", "read_json", "append_jsonl", "read_jsonl",
           "write_csv", "remove_stale_temps"]


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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temp file in the same folder, fsync, then rename over `path`: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes private (0600) files; give the mode open() would have
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


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
    with open(path, "rb") as fh:
        data = fh.read()
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
    """Append one JSON record as a line (flushed, so a crash loses at most the line being written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
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
    """Read JSON lines, skipping a torn final line left by a crash."""
    records = []
    with open(path) as fh:
        for line in fh:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
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

    with open(path, newline="") as f:
        return [{k: parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def check_safetensors(path: Path) -> None:
    """Raise ValueError naming `path` unless it is a complete safetensors file (header parses, sizes add up)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
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

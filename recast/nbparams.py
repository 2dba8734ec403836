"""A notebook's parameters, parsed by the types its ``parameters`` cell declares, and its outputs checked, before any
compute.

papermill's ``-p NAME VALUE`` passes a number for a number and True/False for "True"/"False", but any other text as a
string, which Python then takes at face value: ``-p overwrite false`` is the string "false", which is true, and
``-p T abc`` fails deep inside the notebook. Every notebook's first cell after its parameters therefore calls

    typed_parameters(globals(), outputs=["out_dir"])

which reads the annotations of the parameters cell (``T: int = 10``), parses each value by its declared type, puts
the parsed value back, and checks the output folders and the figures folder (`recast.plotting.check_figures_dir`)
can be written. Anything that does not parse is refused in one line naming the parameter.

It also makes papermill's runs safe to repeat:

- a parameter the notebook does not declare (``-p iteratoins 3``) is an error naming it and the nearest declared
  name (papermill itself only warns and runs the defaults);
- ``run_name`` (every notebook that writes outputs declares it; "" means "make one") names the run after the
  parameters papermill was given (``preset-cpu_method-uniform_iterations-30``; "default" with none), an output
  parameter written with ``{run_name}`` (``out_dir: str = "runs/03_train/{run_name}"``) is filled in, and figures
  and result tables go to ``runs/figures/<run name>/`` and ``runs/results/<run name>/`` ($RECAST_RUN_NAME), so two
  runs with different parameters never write over each other;
- a kernel whose working directory lies inside the clone (JupyterLab starts one in ``notebooks/``) moves to the
  clone's root, so inputs such as ``data/...`` and outputs under ``runs/`` mean the same folders as in the README;
- a run directory that holds a run made with other settings names the notebook's own knob
  (``-p overwrite True``) in its refusal.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

from recast.bounded import load_yaml, short_repr
from recast.config import parse_bool
from recast.kernel import in_kernel

__all__ = ["parse_parameter", "typed_parameters", "check_output_dir", "injected_parameters", "make_run_name",
           "clone_root", "in_kernel",
           "quiet_interrupts_between_cells"]

# not part of a run's name: where it goes and how much of the machine it uses
NOT_IN_NAME = frozenset({"out_dir", "out_root", "run_dir", "run_name", "overwrite", "figure_name", "results_name",
                         "num_threads", "jobs"})


def _fail(name: str, what: str, value) -> ValueError:
    return ValueError(f"notebook parameter {name}: expected {what}, got {short_repr(value)}")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_parameter(name: str, typ, value):
    """`value` as the declared type `typ` (bool, int, float, str, list or dict); other types are returned as they are.

    - bool: True/False, or true/false/yes/no/1/0 in any case (`recast.config.parse_bool`), or the numbers 1/0;
    - int: an integer, or text that is one ("30"); a bool is refused;
    - float: a number, or text that is one ("3e-4");
    - str: text, or a number written as text (``-p lam 0.5``);
    - list: a list, YAML text of one ("[0.4, 0.6]"), comma-separated items ("0,1,2", each a YAML scalar), or one
      scalar (a list of it); "" is [];
    - dict: a mapping, or YAML text of one ("{kl_beta: 2}"); "" is {}.

    Raises:
        ValueError: naming the parameter, the type and the value.
    """
    if typ is bool:
        if isinstance(value, bool):
            return value
        if _is_number(value) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            try:
                return parse_bool(value, f"notebook parameter {name}")
            except ValueError:
                pass
        raise _fail(name, "a boolean (true/false/yes/no/1/0)", value)
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise _fail(name, "an integer", value)
    if typ is float:
        if _is_number(value):
            return float(value)
        if isinstance(value, str):
            try:
                out = float(value.strip())
                if not math.isnan(out):
                    return out
            except ValueError:
                pass
        raise _fail(name, "a number", value)
    if typ is str:
        if isinstance(value, str):
            return value
        if _is_number(value):
            return str(value)
        raise _fail(name, "text", value)
    if typ is list:
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):
            if not value.strip():
                return []
            parsed = load_yaml(value, f"notebook parameter {name}")
            if isinstance(parsed, list):
                return parsed
            if isinstance(parsed, str) and "," in parsed:
                return [load_yaml(item, f"notebook parameter {name}") for item in parsed.split(",") if item.strip()]
            value = parsed
        if value is None or isinstance(value, (str, int, float, bool)):
            return [] if value is None else [value]
        raise _fail(name, "a list", value)
    if typ is dict:
        if isinstance(value, dict):
            return value
        if isinstance(value, str):
            parsed = load_yaml(value, f"notebook parameter {name}") if value.strip() else {}
            if isinstance(parsed, dict):
                return parsed
        raise _fail(name, "a mapping such as {kl_beta: 2}", value)
    return value


def check_output_dir(path, name: str = "out_dir") -> Path:
    """Create the output folder `path` if missing and check this process can write there.

    Raises:
        PermissionError / FileExistsError: naming the parameter and the folder.
    """
    from recast.io import writable_folder

    if not str(path).strip():
        raise ValueError(f"notebook parameter {name}: empty; give a folder")
    return writable_folder(str(path), f"notebook parameter {name}: {path}")


def quiet_interrupts_between_cells() -> bool:
    """In a kernel, let SIGINT interrupt a running cell only, as before, and ignore it between cells.

    A kernel manager (papermill, nbclient, JupyterLab) interrupts the kernel as it shuts it down; one that lands
    while the kernel answers any other message is logged as ``ERROR | KeyboardInterrupt caught in kernel`` after a run
    that succeeded (about 1 papermill run in 3 here). ipykernel arms SIGINT around every message it handles; this
    arms it around running cells only (IPython's ``pre_run_cell`` / ``post_run_cell`` events). Returns whether it
    changed anything (False outside a kernel, or when done before)."""
    import signal

    if not in_kernel():
        return False
    from IPython import get_ipython

    ip = get_ipython()
    kernel = getattr(ip, "kernel", None)
    if kernel is None or getattr(kernel, "_recast_quiet_interrupts", False):
        return False

    def arm(*_):
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def disarm(*_):
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    kernel.pre_handler_hook = lambda: None
    kernel.post_handler_hook = disarm
    ip.events.register("pre_run_cell", arm)
    ip.events.register("post_run_cell", disarm)
    kernel._recast_quiet_interrupts = True
    return True


def injected_parameters(history: Sequence[str] | None) -> dict[str, str]:
    """{name: value as written} of the last cell papermill injected (its source begins "# Parameters"), from the
    kernel's input history (IPython's ``In``); {} when papermill injected none."""
    for source in reversed(list(history or ())):
        if isinstance(source, str) and source.lstrip().startswith("# Parameters"):
            try:
                tree = ast.parse(source)
            except SyntaxError:
                return {}
            out = {}
            for node in tree.body:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            out[target.id] = ast.get_source_segment(source, node.value) or ""
            return out
    return {}


def _slug(text: str) -> str:
    text = re.sub(r"[\s'\"\[\](){}]+", "", text)
    return re.sub(r"[^A-Za-z0-9._,=+-]+", "-", text).strip("-.") or "x"


def make_run_name(given: dict[str, str], max_len: int = 80) -> str:
    """A folder name for a run from the parameters it was given, in their order (outputs and thread counts left
    out, `NOT_IN_NAME`): ``{"preset": "'cpu'", "iterations": "30"}`` gives ``preset-cpu_iterations-30``; "default"
    when none. A name longer than `max_len` keeps its start and ends in 8 hex digits of the whole."""
    parts = [f"{_slug(k)}-{_slug(v)}" for k, v in given.items() if k not in NOT_IN_NAME]
    name = "_".join(parts) or "default"
    if len(name) > max_len:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:max_len - 9].rstrip('_-.')}-{digest}"
    return name


def clone_root(cwd: str | os.PathLike | None = None) -> Path | None:
    """The clone this package was imported from, when `cwd` (default: the working directory) lies inside it;
    None for an installed package or a working directory outside the clone."""
    root = Path(__file__).resolve().parents[1]
    if not ((root / "pyproject.toml").is_file() and (root / "notebooks").is_dir()):
        return None
    here = Path(cwd or Path.cwd()).resolve()
    return root if here == root or root in here.parents else None


def typed_parameters(namespace: dict, outputs: Sequence[str] = (), *, figures: bool = True,
                     kernel: bool | None = None) -> dict:
    """Parse a notebook's parameters in place by their declared types (`parse_parameter`), then check its outputs.

    Args:
        namespace: the notebook's ``globals()``; its ``__annotations__`` (what the parameters cell declares) give
            the types.
        outputs: names of parameters that are output folders (created and checked writable now).
        figures: check the figures folder (`recast.plotting.check_figures_dir`: $RECAST_FIGURES_DIR or
            runs/figures) too.
        kernel: whether this runs in a notebook's kernel (default: detected). Only a kernel moves to the clone's
            root, sets $RECAST_RUN_NAME and names ``overwrite`` in the trainer's refusals: a script calling this
            keeps its working directory and environment.

    Returns:
        {name: parsed value} of every annotated parameter.

    Raises:
        ValueError / OSError: naming the parameter (or $RECAST_FIGURES_DIR) at fault.
    """
    annotations = namespace.get("__annotations__", {})
    given = injected_parameters(namespace.get("In"))
    for name in given:
        if name not in annotations:
            near = difflib.get_close_matches(name, list(annotations), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}? " if near else ""
            raise ValueError(f"notebook parameter {name}: this notebook has no such parameter; {hint}"
                             f"its parameters: {', '.join(annotations)}")
    if kernel is None:
        kernel = in_kernel()
    if kernel:
        quiet_interrupts_between_cells()
    root = clone_root() if kernel else None
    if root is not None and Path.cwd().resolve() != root:
        os.chdir(root)  # JupyterLab's kernel starts in notebooks/: data/ and runs/ mean the clone's
    parsed = {}
    for name, typ in annotations.items():
        if name in namespace:
            parsed[name] = namespace[name] = parse_parameter(name, typ, namespace[name])
    if "run_name" in annotations:
        run = parsed["run_name"].strip() or make_run_name(given)
        if run in (".", "..") or "/" in run or os.sep in run:
            raise ValueError(f"notebook parameter run_name: {short_repr(run)} is not a folder name")
        parsed["run_name"] = namespace["run_name"] = run
        if kernel:
            os.environ["RECAST_RUN_NAME"] = run  # figures and tables of this run: runs/{figures,results}/<run name>
        for name, value in parsed.items():
            if isinstance(value, str) and "{run_name}" in value:
                parsed[name] = namespace[name] = value.replace("{run_name}", run)
    if kernel and "overwrite" in annotations:
        from recast.trainer import rundir

        rundir.OVERWRITE_HINT = "overwrite = True (papermill: -p overwrite True)"
        if "run_name" in annotations:
            rundir.OVERWRITE_HINT += " or another run_name"
    for name in outputs:
        if name not in namespace:
            raise ValueError(f"typed_parameters: no parameter {name!r} to check as an output folder")
        check_output_dir(namespace[name], name)
    if figures:
        from recast.plotting import check_figures_dir

        check_figures_dir()
    return parsed

"""Whether this process is a Jupyter kernel (imported by the notebooks' helpers and the trainer's progress)."""

from __future__ import annotations

__all__ = ["in_kernel"]


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (JupyterLab's, papermill's, nbmake's), not a script or a shell."""
    import sys

    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except Exception:  # noqa: BLE001 - IPython without a shell
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})

"""Credit assignment across timesteps, every method behind one object (`Credit`; docs/credit.md).

`Credit.from_table(path)` is the paper's ReCAST from a weight table; `Credit(names, T, lam, method=...)` any other
method of `METHODS`. Imports torch and numpy only.
"""

from recast.credit.core import MAX_STEPS, SIGNALS, Credit, CreditBatch, Trajectory
from recast.credit.methods import AGGREGATIONS, KERNELS, METHODS, WEIGHTS, MethodSpec, resolve_method
from recast.credit.signals import group_index

__all__ = ["Credit", "CreditBatch", "Trajectory", "METHODS", "AGGREGATIONS", "KERNELS", "WEIGHTS", "SIGNALS",
           "MAX_STEPS", "MethodSpec", "resolve_method", "group_index"]

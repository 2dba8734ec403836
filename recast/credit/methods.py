"""The credit methods by name: where each one's W comes from and how it turns raw rewards into a training signal.

Every method is two choices (docs/method.md, "Methods and where they depart from the paper"):

* **weights**, the (K, T) matrix W with rows λ and columns 1/T (Σλ = 1):
  ``table`` (built once, offline, from a density-ratio profile: the paper's), ``flat`` (W = λ/T), ``live``
  (re-estimated every iteration from the policy's own x̂_0: this repo's first reading), ``fixed`` (a matrix the user
  gives), or ``sample`` (a per-sample step credit without W's marginals: the per_step and otca baselines).
* **aggregation**, how raw rewards R (K, B) become the signal of a (sample, step) pair:
  ``pre`` (the paper's: r_t = Σ_k (T·W)[k, t] R_k, then normalised per step within each prompt group),
  ``loss`` (the paper's alternative: each reward normalised in its group, mixed through T·W),
  ``per_reward`` (this repo's first reading, GDPO-style: each reward normalised first, (std + 1e-4) with a global
  or group std, near-constant rewards silenced, then mixed through T·W), or ``reward_sum`` (DiffusionNFT's raw
  weighted sum normalised as one reward, the same signal at every step).

`resolve_method` is the one place a method name and an aggregation override become a `MethodSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MethodSpec", "METHODS", "AGGREGATIONS", "WEIGHTS", "KERNELS", "resolve_method"]

AGGREGATIONS = ("pre", "loss", "per_reward", "reward_sum")
WEIGHTS = ("table", "flat", "live", "fixed", "sample")
KERNELS = ("exp", "power")  # the live W's kernel: the paper's exp(g / mean g / τ) | our (q + floor)^(1/τ)


@dataclass(frozen=True)
class MethodSpec:
    """A credit method, resolved.

    Attributes:
        name: the method's name.
        weights: where W comes from (one of WEIGHTS).
        aggregation: how rewards become a signal (one of AGGREGATIONS).
        kernel: the live W's kernel (one of KERNELS; only read when weights == "live").
        paper: whether this is the authors' released recipe (weights "table" or "flat" with the "pre" aggregation).
        summary: one line for help texts and tables.
    """

    name: str
    weights: str
    aggregation: str
    kernel: str = "power"
    summary: str = ""

    @property
    def paper(self) -> bool:
        return self.weights in ("table", "flat") and self.aggregation == "pre"


# name -> (weights, default aggregation, whether the aggregation may be overridden, live kernel, summary)
_TABLE = {
    "recast": ("table", "pre", True, "exp", "the paper's ReCAST: W from a weight table built offline, raw rewards "
                                            "mixed by T·W and normalised per step within each prompt group"),
    "static": ("flat", "pre", True, "exp", "the paper's static baseline: W = λ/T under the same code (the raw "
                                           "weighted sum with per-group std)"),
    "recast_live": ("live", "per_reward", True, "power", "this repo's first reading: W re-estimated live from the "
                                                         "policy's x̂_0, rewards normalised one by one first"),
    "uniform": ("flat", "per_reward", False, "power", "GDPO-style: each reward normalised (global std), then the "
                                                      "λ-weighted sum (W = λ/T)"),
    "reward_sum": ("flat", "reward_sum", False, "power", "DiffusionNFT's raw weighted sum Σ λ_k R_k normalised as one "
                                                         "reward with the global std"),
    "fixed": ("fixed", "per_reward", True, "power", "a W the user gives (rows λ, equal columns)"),
    "per_step": ("sample", "per_reward", False, "power", "CoCA-style per-sample step credit (no budgets by "
                                                         "construction)"),
    "otca": ("sample", "per_reward", False, "power", "OTCA as read from its abstract: trajectory credit times per-sample "
                                                     "min-norm reward coefficients"),
}
METHODS = tuple(_TABLE)


def resolve_method(name: str, aggregation: str = "auto", kernel: str = "auto") -> MethodSpec:
    """The `MethodSpec` of a method name, with its aggregation and live kernel ("auto" = the method's own).

    Raises:
        ValueError: an unknown method, aggregation or kernel, or an override a method does not take (uniform,
            reward_sum, per_step and otca are defined by their aggregation).
    """
    if name not in _TABLE:
        raise ValueError(f"unknown method {name!r}; choose one of {METHODS}")
    weights, default, open_, own_kernel, summary = _TABLE[name]
    agg = default if aggregation in ("auto", "", None) else aggregation
    if agg not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {agg!r}; choose one of {AGGREGATIONS} (or 'auto')")
    if agg != default and (not open_ or agg == "reward_sum"):
        raise ValueError(f"method {name!r} is defined by its aggregation {default!r}; aggregation {agg!r} is "
                         "another method (see `recast.credit.METHODS`)")
    k = own_kernel if kernel in ("auto", "", None) else kernel
    if k not in KERNELS:
        raise ValueError(f"unknown kernel {k!r}; choose one of {KERNELS} (or 'auto')")
    return MethodSpec(name, weights, agg, k, summary)

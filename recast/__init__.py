"""ReCAST: Reward Credit Assignment across Timesteps for online diffusion RL.

The core is importable from the top level::

    import recast
    W = recast.solve_weights(gains, lam, temperature=0.5)
"""

from recast import quiet as _quiet
from recast.informativeness import (
    InformativenessTracker,
    posterior_discriminability,
    renyi_discriminability,
    telescoping_gains,
    tweedie_discriminability,
)
from recast.offline import paper_weights
from recast.solver import ConvergenceError, solve_weights, static_weights

__version__ = "0.1.0"

__all__ = [
    "ConvergenceError",
    "paper_weights",
    "InformativenessTracker",
    "posterior_discriminability",
    "renyi_discriminability",
    "solve_weights",
    "static_weights",
    "telescoping_gains",
    "tweedie_discriminability",
]

_quiet.install()  # drop the libraries' known, harmless messages before any of them is imported (quiet.py)

"""The ReCAST trainer: advantages, losses (NFT, GRPO), policy copies, the online loop, checkpoints and resume."""

from recast.trainer.loop import NonFiniteLossError, Trainer, TrainingStopped, train
from recast.trainer.metrics import Run, load_run

__all__ = ["Trainer", "train", "Run", "load_run", "NonFiniteLossError", "TrainingStopped"]

"""Training on the engine: autograd over the IR, optimizers compiled into the step,
resident parameters and moments, exact checkpoints. See docs/training.md."""

from anekit.train.autograd import grad, grad_name
from anekit.train.modes import dropout, dropout_mask

__all__ = ["dropout", "dropout_mask", "grad", "grad_name"]

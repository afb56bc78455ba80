"""Training on the engine: autograd over the IR, optimizers compiled into the step,
resident parameters and moments, exact checkpoints. See docs/training.md."""

from anekit.train.autograd import grad, grad_name
from anekit.train.modes import dropout, dropout_mask
from anekit.train.optim import SGD, Adam, AdamW, Optimizer
from anekit.train.schedules import warmup_cosine
from anekit.train.trainer import Trainer, select_parameters

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "Trainer", "dropout", "dropout_mask", "grad",
           "grad_name", "select_parameters", "warmup_cosine"]  # fmt: skip

"""Ending `fit` exactly: after a number of optimizer updates, or at a deadline."""

from __future__ import annotations

import logging
import time

import keras

from tfformer.train.state import optimizer_step

logger = logging.getLogger(__name__)


class StopAtStep(keras.callbacks.Callback):
    """Stops training once the optimizer has made `total_steps` updates, so that the last epoch
    may be shorter than the others and every run ends at exactly `total_steps`."""

    def __init__(self, total_steps: int):
        super().__init__()
        self.total_steps = total_steps

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model) >= self.total_steps:
            self.model.stop_training = True


class StopAtTime(keras.callbacks.Callback):
    """Stops training in time for the run to end by a deadline, epoch-end work included.

    Checked after every batch: training stops once the time left is less than what the last
    epoch end took (validation, dev BLEU, checkpoints: they run after the stop too), so the run
    ends near the deadline instead of one epoch-end's work after it.

    Args:
        deadline: the end, in seconds of `clock`.
        clock: the time source (`time.monotonic`).

    Attributes:
        stopped: whether this callback stopped training.
    """

    def __init__(self, deadline: float, clock=time.monotonic):
        super().__init__()
        self.deadline = deadline
        self.clock = clock
        self.stopped = False
        self._epoch_end_cost = 0.0
        self._last_batch_end: float | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._last_batch_end is not None:
            self._epoch_end_cost = self.clock() - self._last_batch_end

    def on_train_batch_end(self, batch, logs=None):
        self._last_batch_end = now = self.clock()
        if now + self._epoch_end_cost >= self.deadline:
            self.stopped = True
            self.model.stop_training = True

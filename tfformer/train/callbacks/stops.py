"""Ending `fit` exactly: after a number of optimizer updates, at a deadline, on a NaN loss.

None of them makes Keras wait for a step's results before it dispatches the next: Keras 3 then
runs the batch-end hooks in a thread (on JAX; TensorFlow's callbacks stay in line), and a JAX
step is queued while the last one computes. So the per-step checks that need no result run at
batch *begin* in the main thread, from counts kept here, and touch the model through
`self._model`: Keras' `self.model` syncs every JAX variable back into the model, which would
cost a wait each step. The NaN check, which needs the loss, is marked `async_safe` and stops
training one or two steps after the NaN, from Keras' thread, without that sync.
"""

from __future__ import annotations

import logging
import math
import time

import keras

from tfformer.train.state import optimizer_step

logger = logging.getLogger(__name__)


class StopAtStep(keras.callbacks.Callback):
    """Stops training once the optimizer has made `total_steps` updates, so that the last epoch
    may be shorter than the others and every run ends at exactly `total_steps`.

    The batch that makes the last update is known when it begins (the optimizer's step at the
    start of `fit` plus the batches begun, over the gradient accumulation): training is stopped
    there, and Keras ends the epoch after that batch.
    """

    def __init__(self, total_steps: int):
        super().__init__()
        self.total_steps = total_steps
        self._start = 0
        self._begun = 0
        self._accumulation = 1

    def on_train_begin(self, logs=None):
        self._start = optimizer_step(self.model)
        self._accumulation = self.model.optimizer.gradient_accumulation_steps or 1
        self._begun = 0

    def on_train_batch_begin(self, batch, logs=None):
        self._begun += 1
        if self._start + self._begun // self._accumulation >= self.total_steps:
            self._model.stop_training = True  # not self.model: no sync (module docstring)


class StopAtTime(keras.callbacks.Callback):
    """Stops training in time for the run to end by a deadline, epoch-end work included.

    Checked as each batch begins: training stops once the time left is less than what the last
    epoch end took (validation, dev BLEU, checkpoints: they run after the stop too, measured
    from the last batch's start, so a step on the safe side), so the run ends near the deadline
    instead of one epoch-end's work after it.

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
        self._last_batch_begin: float | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._last_batch_begin is not None:
            self._epoch_end_cost = self.clock() - self._last_batch_begin

    def on_train_batch_begin(self, batch, logs=None):
        self._last_batch_begin = now = self.clock()
        if now + self._epoch_end_cost >= self.deadline:
            self.stopped = True
            self._model.stop_training = True  # not self.model: no sync (module docstring)


class StopOnNaN(keras.callbacks.Callback):
    """Stops training when a batch's loss is NaN or infinite (the epoch's RunState backup then
    refuses it, and the run ends with `TrainingStopped`), as `keras.callbacks.TerminateOnNaN`
    does, without making Keras wait for each step's loss (`async_safe`)."""

    async_safe = True

    def __init__(self):
        super().__init__()
        self.stopped_at: int | None = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)) and self.stopped_at is None:
            self.stopped_at = batch
            logger.error("batch %d: loss %s, training stops", batch, loss)
            self._model.stop_training = True  # from Keras' thread: no sync (module docstring)

"""What the run's data did each epoch, in the log: pairs dropped, lines skipped, batch shapes,
padding and compilations."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import keras

from tfformer.train import compilations

if TYPE_CHECKING:  # or the prepared store's (tfformer.data.loader), without TensorFlow
    from tfformer.data.batching import BatchStats
    from tfformer.train.inputs import Counters

logger = logging.getLogger(__name__)


class LogDataCounters(keras.callbacks.Callback):
    """Logs, after each epoch, the bad lines skipped and the over-length pairs dropped by the
    training stream during that epoch."""

    def __init__(self, counters: Counters, max_length: int):
        super().__init__()
        self.counters = counters
        self.max_length = max_length
        self._last = counters.read()

    def on_epoch_end(self, epoch, logs=None):
        now = self.counters.read()
        dropped = now["dropped"] - self._last["dropped"]
        skipped = now["skipped"] - self._last["skipped"]
        self._last = now
        logger.info("epoch %d: the stream dropped %d pair(s) longer than %d tokens%s",
                    epoch + 1, dropped, self.max_length,
                    f" and skipped {skipped} bad line(s)" if skipped else "")


class LogBatchShapes(keras.callbacks.Callback):
    """Logs, after each epoch, the distinct shapes of the training batches so far, their
    padding, and the programs compiled for the train and test steps (where the backend tells,
    `tfformer.train.compilations`).

    Attributes:
        summary: what was last logged, as a dict (also the run's `TrainResult.batches`).
    """

    def __init__(self, stats: BatchStats, backend: str):
        super().__init__()
        self.stats = stats
        self._counting = compilations.start_counting(backend)
        self._compiled_before = compilations.step_compilations()
        self.summary: dict = {}

    def on_epoch_end(self, epoch, logs=None):
        found = self.stats.read()
        compiled = None
        if self._counting:
            now = compilations.step_compilations()
            compiled = {name: now[name] - self._compiled_before[name] for name in now}
        self.summary = {**found, "compilations": compiled}
        shapes = ", ".join(f"{shape} ({count})" for shape, count in found["shapes"].items())
        logger.info("epoch %d: %d batch shape(s) so far, rows x length (batches): %s; "
                    "%.1f%% of the batch positions are padding; %s", epoch + 1,
                    len(found["shapes"]), shapes, 100 * found["padding"],
                    "compiled: " + ", ".join(f"{name} {n}" for name, n in compiled.items())
                    if compiled is not None else "XLA keeps one program per shape")

"""What the run's data did each epoch, in the log: pairs dropped, lines skipped, batch shapes,
padding, compilations and throughput."""

from __future__ import annotations

import json
import logging
import time
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


class LogThroughput(keras.callbacks.Callback):
    """Logs, after each epoch, its training time (from the epoch's start to its validation's,
    dev BLEU and checkpoints left out), the time per step and the target tokens per second
    (the steps times the mean target tokens of the batches built so far), and on JAX the
    device's peak memory: what `benchmarks/training/train_gpu_e2e.py` reads from a real run.

    Attributes:
        epochs: per epoch {"epoch", "steps", "train_seconds", "step_seconds",
            "target_tokens_per_second", "peak_bytes"}.
    """

    def __init__(self, stats: "BatchStats", backend: str, clock=time.perf_counter):
        super().__init__()
        self.stats, self.backend, self.clock = stats, backend, clock
        self.epochs: list[dict] = []
        self._started = self._trained = None
        self._steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._started, self._trained, self._steps = self.clock(), None, 0

    def on_train_batch_begin(self, batch, logs=None):
        self._steps += 1

    def on_test_begin(self, logs=None):
        if self._started is not None and self._trained is None:
            # Validation starts: the epoch's steps are dispatched, maybe not done (JAX queues
            # them). Fit has put the state back into the model; reading the step count waits
            # for the last step (one program: all its outputs are ready together).
            keras.ops.convert_to_numpy(self._model.optimizer.iterations)
            self._trained = self.clock()

    def on_epoch_end(self, epoch, logs=None):
        if self._started is None or not self._steps:
            return
        seconds = (self._trained or self.clock()) - self._started
        found = self.stats.read()
        per_batch = found.get("target_tokens", 0) / max(found["batches"], 1)
        row = {"epoch": epoch + 1, "steps": self._steps, "train_seconds": round(seconds, 4),
               "step_seconds": round(seconds / self._steps, 5),
               "target_tokens_per_second": round(self._steps * per_batch / seconds),
               "peak_bytes": device_peak_bytes() if self.backend == "jax" else None}
        self.epochs.append(row)
        logger.info("epoch %d: throughput %s", epoch + 1, json.dumps(row))


def device_peak_bytes() -> int | None:
    """This process' first JAX device's peak memory in use (None where it does not tell: a
    CPU)."""
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")

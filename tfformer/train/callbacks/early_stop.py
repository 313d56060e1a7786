"""Early stopping on dev BLEU (`--patience K`), as fairseq, Marian, Sockeye and OpenNMT have it:
training stops after K evaluations without a better dev BLEU, and the best weights are kept.

The count is made from the run's history (one row per finished epoch, with its dev_bleu), so a
resumed run knows where it stood, and a run that stopped early does not train again when rerun.
"""

from __future__ import annotations

import json
import logging
import math

import keras

from tfformer.train.checkpoints import WeightsWriter
from tfformer.train.state import optimizer_step
from tfformer.utils.files import atomic_write_text
from tfformer.utils.run_dir import RunDir

logger = logging.getLogger(__name__)

METRIC = "dev_bleu"


def best_and_since(history: list[dict]) -> tuple[dict | None, int]:
    """(the history row with the best dev BLEU, first of equals; the evaluations after it)."""
    best, since = None, 0
    for row in history:
        value = row.get(METRIC)
        if value is None or not math.isfinite(value):
            continue
        if best is None or value > best[METRIC]:
            best, since = row, 0
        else:
            since += 1
    return best, since


class KeepBestDevBleu(keras.callbacks.Callback):
    """Writes RUN/best.weights.h5 whenever an epoch's dev BLEU beats the run's best, and stops
    training after `patience` epochs without one. Put it after `DevBleu` (whose logs it reads)
    and before `RunState`.

    Args:
        run: the run directory.
        patience: K.
        history: the finished epochs' rows before this start (RunState's).
        weights: the run's writer (`RunState.weights`): the best weights are then a hard link
            to the epoch's checkpoint, saved once; None: one of its own.

    Attributes:
        stopped: whether it stopped training.
    """

    def __init__(self, run: RunDir, patience: int, history: list[dict],
                 weights: WeightsWriter | None = None):
        super().__init__()
        self.run, self.patience = run, patience
        self.weights = weights or WeightsWriter()
        self.history = list(history)
        self.stopped = False

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or METRIC not in logs:
            return
        before, _ = best_and_since(self.history)
        self.history.append({"epoch": epoch + 1, METRIC: float(logs[METRIC])})
        best, since = best_and_since(self.history)
        if best is not before:
            self.weights.write(self.model, self.run.best_weights, optimizer_step(self.model))
            logger.info("epoch %d: best dev BLEU so far (%.2f), kept in %s", epoch + 1,
                        best[METRIC], self.run.best_weights)
        elif since >= self.patience:
            self.stopped = True
            self.model.stop_training = True


def exhausted(history: list[dict], patience: int | None) -> bool:
    """Whether the run's history already ran out of patience (a rerun of a run that stopped)."""
    return patience is not None and best_and_since(history)[1] >= patience


def record_stop(run: RunDir, history: list[dict], patience: int, step: int) -> dict:
    """RUN/early_stop.json: why the run stopped, at which step, and its best epoch."""
    best, since = best_and_since(history)
    record = {"reason": f"no better dev BLEU in {since} evaluations (patience {patience})",
              "step": step, "best_epoch": best["epoch"], "best_step": best.get("step"),
              "best_dev_bleu": best[METRIC]}
    atomic_write_text(run.early_stop, json.dumps(record, indent=2))
    return record

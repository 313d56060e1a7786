"""The epoch checkpoints: saved atomically after each epoch, the last K kept (§6.1)."""

from __future__ import annotations

import os

import keras

from tfformer.train.checkpoints import WeightsWriter, checkpoint_name, list_checkpoints
from tfformer.train.state import optimizer_step
from tfformer.utils.checks import check_at_least
from tfformer.utils.files import remove_temporaries


class KeepLastCheckpoints(keras.callbacks.Callback):
    """Saves the weights after each epoch, atomically, and keeps only the newest `keep` files.

    Args:
        directory: where `ckpt-EPOCH.weights.h5` files go (EPOCH counts from 1).
        keep: how many to keep (the paper averages the last 5, §6.1).
        weights: the writer the run's backups share (`RunState.weights`), which then link the
            epoch's checkpoint instead of saving the same step again; None: one of its own.
    """

    def __init__(self, directory: str, keep: int = 5, weights: WeightsWriter | None = None):
        super().__init__()
        check_at_least("keep", keep)
        self.directory = directory
        self.keep = keep
        self.weights = weights or WeightsWriter()
        remove_temporaries(directory)

    def on_epoch_end(self, epoch, logs=None):
        # An epoch redone after a kill replaces its checkpoint whole (written aside, renamed).
        path = os.path.join(self.directory, checkpoint_name(epoch + 1))
        step = optimizer_step(self.model) if getattr(self.model, "optimizer", None) else None
        self.weights.write(self.model, path, step)
        for stale in list_checkpoints(self.directory)[:-self.keep]:
            os.remove(stale)

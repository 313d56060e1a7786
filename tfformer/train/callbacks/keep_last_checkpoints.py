"""The epoch checkpoints: saved atomically after each epoch, the last K kept (§6.1)."""

from __future__ import annotations

import os

import keras

from tfformer.train.checkpoints import checkpoint_name, list_checkpoints
from tfformer.utils.checks import check_at_least
from tfformer.utils.files import atomic_write, remove_temporaries


class KeepLastCheckpoints(keras.callbacks.Callback):
    """Saves the weights after each epoch, atomically, and keeps only the newest `keep` files.

    Args:
        directory: where `ckpt-EPOCH.weights.h5` files go (EPOCH counts from 1).
        keep: how many to keep (the paper averages the last 5, §6.1).
    """

    def __init__(self, directory: str, keep: int = 5):
        super().__init__()
        check_at_least("keep", keep)
        self.directory = directory
        self.keep = keep
        remove_temporaries(directory)

    def on_epoch_end(self, epoch, logs=None):
        # An epoch redone after a kill replaces its checkpoint whole (written aside, renamed).
        path = os.path.join(self.directory, checkpoint_name(epoch + 1))
        atomic_write(path, self.model.save_weights)
        for stale in list_checkpoints(self.directory)[:-self.keep]:
            os.remove(stale)

"""A run's weight files, named, listed, kept and averaged in one place.

    RUN/checkpoints/ckpt-EPOCH.weights.h5   one per finished epoch, the last K kept (§6.1)
    RUN/backup/step-STEP.weights.h5         the backup `tfformer.train.state.RunState` commits

The backups' writing and committing stay in RunState: the weights file and the state.json that
names it are one commit, and splitting that protocol over two modules would hide the order that
makes it crash-safe. Their file names are defined here, beside the checkpoints'.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Sequence

import keras
import numpy as np

from tfformer.utils.checks import check_at_least
from tfformer.utils.run_dir import RunDir

logger = logging.getLogger(__name__)

CHECKPOINT_GLOB = "ckpt-*.weights.h5"
BACKUP_GLOB = "step-*.weights.h5"


def checkpoint_name(epoch: int) -> str:
    """The file name of epoch `epoch`'s checkpoint (epochs count from 1)."""
    return f"ckpt-{epoch:05d}.weights.h5"


def backup_name(step: int) -> str:
    """The file name of the backup of optimizer step `step`."""
    return f"step-{step:09d}.weights.h5"


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint files written by KeepLastCheckpoints, oldest first."""
    return sorted(glob.glob(os.path.join(directory, CHECKPOINT_GLOB)))


def list_backups(directory: str) -> list[str]:
    """Backup weights files in `directory` (a run's backup/), committed or not."""
    return sorted(glob.glob(os.path.join(directory, BACKUP_GLOB)))


def average_checkpoints(model: keras.Model, paths: Sequence[str]) -> keras.Model:
    """Sets `model`'s weights to the element-wise mean of the checkpoints at `paths` (§6.1).

    Args:
        model: a built model with the checkpoints' architecture.
        paths: `.weights.h5` files saved by `model.save_weights` / KeepLastCheckpoints.

    Returns:
        the same model, holding the averaged weights.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    total = None
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"checkpoint {path} not found")
        model.load_weights(path)
        weights = [keras.ops.convert_to_numpy(w).astype(np.float64) for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    for variable, summed in zip(model.weights, total):
        # Float weights are averaged; integer state (e.g. dropout seeds) keeps the last value.
        if "float" in str(variable.dtype):
            variable.assign((summed / len(paths)).astype(variable.dtype))
    return model


def average_last(model: keras.Model, run_dir: str | os.PathLike, last: int) -> list[str]:
    """Sets `model`'s weights to the mean of the run's last `last` epoch checkpoints (§6.1), or
    of all of them when there are fewer (with a warning); returns the files averaged.

    Raises:
        FileNotFoundError: the run has no checkpoint.
    """
    check_at_least("last", last)
    run = RunDir(run_dir)
    paths = list_checkpoints(run.checkpoints)[-last:]
    if not paths:
        raise FileNotFoundError(f"{run.checkpoints} holds no checkpoint ({CHECKPOINT_GLOB})")
    if len(paths) < last:
        logger.warning("only %d checkpoint(s) to average, not %d", len(paths), last)
    average_checkpoints(model, paths)
    return paths

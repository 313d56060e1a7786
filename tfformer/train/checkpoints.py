"""A run's weight files, named, listed, kept and averaged in one place.

    RUN/checkpoints/ckpt-EPOCH.weights.h5   one per finished epoch, the last K kept (§6.1)
    RUN/backup/step-STEP.weights.h5         the backup `tfformer.train.state.RunState` commits

The backups' writing and committing stay in RunState: the weights file and the state.json that
names it are one commit, and splitting that protocol over two modules would hide the order that
makes it crash-safe. Their file names are defined here, beside the checkpoints'.

At an epoch's end the checkpoint and the backup hold the same weights and optimizer state: one
`WeightsWriter` saves them once and links the second name to the first file.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from typing import Sequence

import keras
import numpy as np

from tfformer.utils.checks import check_at_least
from tfformer.utils.files import atomic_write
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


class WeightsWriter:
    """Writes `model.save_weights` files atomically, saving the weights of an optimizer step
    once: a second file of the step it saved last is a hard link to that file (the same bytes,
    no second write of the weights and optimizer state and no second copy on disk), or a copy
    where the file system has no hard links.

    The files are never rewritten in place (each write replaces a whole file), so deleting one
    name of a linked pair leaves the other intact. Under JAX, saving is a collective: every
    process must decide to save or reuse alike, so the decision rests on the step alone.
    """

    def __init__(self):
        self._last: tuple[int, str] | None = None  # (step, path) of the last save

    def saved(self, step: int | None) -> bool:
        """Whether this writer saved the weights of `step` last (a write of it will reuse)."""
        return step is not None and self._last is not None and self._last[0] == step

    def write(self, model: keras.Model, path: str, step: int | None) -> None:
        """Writes `model`'s weights at optimizer step `step` to `path`, atomically (None: a
        model without an optimizer, saved every time)."""
        if self.saved(step):
            source = self._last[1]
            try:
                atomic_write(path, lambda temporary: _link_or_copy(source, temporary))
                return
            except FileNotFoundError:  # removed since: save it again
                pass
        atomic_write(path, model.save_weights)
        self._last = (step, os.path.abspath(path))


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except FileNotFoundError:
        raise
    except OSError:  # no hard links here (another file system, or none supported)
        shutil.copyfile(source, destination)


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

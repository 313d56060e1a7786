"""RunState: the callback that backs up a run every N updates and after each epoch, and
restores it (the protocol is `tfformer.train.state`'s)."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import tempfile
from typing import Any

import keras
import numpy as np

from tfformer.train.checkpoints import WeightsWriter, backup_name, list_backups
from tfformer.train.state import (
    STATE_FILENAME,
    history_csv,
    logged_tensorboard_steps,
    optimizer_step,
)
from tfformer.utils.checks import check_at_least
from tfformer.utils.files import atomic_write, atomic_write_text, remove_temporaries
from tfformer.utils.run_dir import RunDir

logger = logging.getLogger(__name__)

# state.json's key for the running metrics of the epoch a mid-epoch backup was taken in.
EPOCH_METRICS = "epoch_metrics"


class RunState(keras.callbacks.Callback):
    """Backs up weights and optimizer state every `backup_every` updates and after each epoch,
    with the history of finished epochs; `restore` continues from the last backup.

    A backup in the middle of an epoch also keeps the state of the epoch's running metrics
    (Keras' loss tracker and the compiled metrics' totals and counts), and a run resumed there
    starts the epoch with it: the epoch's logged loss and accuracy average all its batches, as
    an uninterrupted run's do, not only those after the resume.

    Put it last among the callbacks: its epoch-end row takes the logs that the others (dev BLEU)
    added. The epoch number it records is Keras' `epoch + 1`: `fit` must be given the true
    `initial_epoch` on resume (see `tfformer.train.fit.fit_resumable`).

    Args:
        run_dir: the run directory; backups go to `run_dir/backup/`, the history to
            `run_dir/metrics.csv` and TensorBoard scalars to `run_dir/logs/{train,validation}`
            (where TensorFlow is installed: its summary writer writes them).
        backup_every: optimizer updates between mid-epoch backups.
        keep_initial_weights: also write the weights before the first update to
            `run_dir/initial.weights.h5` (once per run).
        writes: False for a JAX process other than process 0: it resumes from process 0's
            backup in `run_dir` (all processes then start at one step) and writes nothing.

    `weights`: its WeightsWriter, to share with KeepLastCheckpoints: an epoch's backup is then a
    link to the epoch's checkpoint, saved once.
    """

    def __init__(self, run_dir: str, backup_every: int, keep_initial_weights: bool = False,
                 writes: bool = True):
        super().__init__()
        check_at_least("backup_every", backup_every)
        self.run = RunDir(run_dir)
        self.backup_dir = self.run.backup
        self.logs_dir = self.run.logs
        self.backup_every = backup_every
        self.keep_initial_weights = keep_initial_weights
        self.writes = writes
        self.weights = WeightsWriter()
        for directory in (run_dir, self.backup_dir) if writes else ():
            for name in remove_temporaries(directory):
                logger.info("removed %s, left by a write that was killed", name)
        self.state = self._read_state()
        self._last_backup_step: int | None = None
        self._fit_start = self._batches_done = 0
        self._epoch = 0
        self._accumulation = 1
        self._writers: dict[str, Any] = {}
        self.tensorboard = importlib.util.find_spec("tensorflow") is not None
        if not self.tensorboard:
            logger.info("no TensorBoard scalars in %s: TensorFlow is not installed (metrics.csv "
                        "has the same history)", self.logs_dir)
        self._logged: dict[str, set[tuple[str, int]]] | None = None  # read once, then kept

    # -- the committed state --------------------------------------------------------------------

    @property
    def step(self) -> int:
        """The optimizer step of the last backup (0 before the first)."""
        return self.state["step"]

    @property
    def history(self) -> list[dict]:
        """One row per finished epoch: epoch, step, then the epoch's logs."""
        return self.state["history"]

    def _read_state(self) -> dict:
        path = os.path.join(self.backup_dir, STATE_FILENAME)
        if not os.path.exists(path) and not self.writes:
            return {"step": 0, "weights": None, "history": []}
        if not os.path.exists(path):
            # A weights file whose state.json a kill prevented is uncommitted: not a backup.
            for orphan in list_backups(self.backup_dir):
                os.remove(orphan)
            if os.path.isdir(self.backup_dir) and os.listdir(self.backup_dir):
                # e.g. Keras BackupAndRestore's files, written by tfformer before RunState:
                # starting over would rewrite metrics.csv from an empty history.
                raise ValueError(
                    f"{self.backup_dir} holds a backup without {STATE_FILENAME} (written by an "
                    "earlier tfformer?) that this version cannot resume; finish the run with "
                    "that version, or move backup/ and metrics.csv away to start from step 0")
            return {"step": 0, "weights": None, "history": []}
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        weights = os.path.join(self.backup_dir, state["weights"])
        if not os.path.exists(weights):
            raise FileNotFoundError(f"{path} names {weights}, which is missing")
        return state

    def restore(self, model: keras.Model) -> int:
        """Loads the last backup's weights and optimizer state into `model` (compiled, under
        its strategy's scope); returns the optimizer step it holds."""
        if self.state["weights"] is None:
            return 0
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(os.path.join(self.backup_dir, self.state["weights"]))
        step = optimizer_step(model)
        if step != self.step:
            raise ValueError(f"backup {self.state['weights']} holds step {step}, but "
                             f"{STATE_FILENAME} says {self.step}")
        logger.info("restored the backup of step %d (%d finished epochs)", step,
                    len(self.history))
        return step

    def _commit(self, step: int, history: list[dict], mid_epoch: bool = False) -> None:
        """Backs up `step`; `mid_epoch`: with the running metrics of the epoch under way."""
        if not self.writes:
            # Process 0 saves the step's weights here (unless its writer saved this step
            # already, as this process's did). Under JAX, syncing the state into the model and
            # gathering the weights are collectives that every process must take at the same
            # point: this one saves them too, where nothing keeps them.
            if not self.weights.saved(step):
                with tempfile.TemporaryDirectory() as scratch:
                    self.weights.write(self.model, os.path.join(scratch, backup_name(step)), step)
            self.state = {**self.state, "step": step, "history": history}
            self._last_backup_step = step
            return
        name = backup_name(step)
        self.weights.write(self.model, os.path.join(self.backup_dir, name), step)
        state = {"step": step, "weights": name, "history": history}
        if mid_epoch:  # read after save_weights, which synced the model's state under JAX
            state[EPOCH_METRICS] = {"epoch": self._epoch + 1, "values": [
                keras.ops.convert_to_numpy(variable).tolist()
                for variable in self.model.metrics_variables]}
        atomic_write_text(os.path.join(self.backup_dir, STATE_FILENAME),
                          json.dumps(state, indent=1))
        self.state = state
        self._last_backup_step = step
        for path in list_backups(self.backup_dir):
            if os.path.basename(path) != name:
                os.remove(path)

    # -- views of the history -------------------------------------------------------------------

    def publish(self) -> None:
        """Rewrites metrics.csv from the committed history and adds to TensorBoard the rows it
        lacks (a kill can fall between the commit and these writes)."""
        if not self.writes:
            return
        atomic_write_text(self.run.metrics, history_csv(self.history))
        if not self.tensorboard:
            return
        import tensorflow as tf

        if self._logged is None:
            self._logged = {split: logged_tensorboard_steps(os.path.join(self.logs_dir, split))
                            for split in ("train", "validation")}
        for row in self.history:
            for split, tag, value in self._scalars(row):
                if (tag, row["step"]) not in self._logged[split]:
                    with self._writer(split).as_default():
                        tf.summary.scalar(tag, value, step=row["step"])
                    self._logged[split].add((tag, row["step"]))
        for writer in self._writers.values():
            writer.flush()

    @staticmethod
    def _scalars(row: dict):
        for key, value in row.items():
            if key in ("epoch", "step"):
                continue
            if key.startswith("val_"):
                yield "validation", "epoch_" + key[len("val_"):], value
            else:
                yield "train", "epoch_" + key, value

    def _writer(self, split: str):
        if split not in self._writers:
            import tensorflow as tf

            self._writers[split] = tf.summary.create_file_writer(
                os.path.join(self.logs_dir, split))
        return self._writers[split]

    # -- callback hooks -------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        step = optimizer_step(self.model)
        self._last_backup_step = step
        self._fit_start = step
        self._accumulation = self.model.optimizer.gradient_accumulation_steps or 1
        self._batches_done = 0
        if self.writes and self.keep_initial_weights and step == 0 \
                and self.state["weights"] is None:
            atomic_write(self.run.initial_weights, self.model.save_weights)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        # Only the epoch a run resumes in can begin with its own mid-epoch backup committed.
        saved = self.state.get(EPOCH_METRICS)
        if not saved or saved["epoch"] != epoch + 1:
            return
        variables = self.model.metrics_variables
        shapes = [tuple(variable.shape) for variable in variables]
        if shapes != [np.shape(value) for value in saved["values"]]:
            logger.warning("epoch %d's running metrics in the backup do not fit this model's "
                           "metrics: the epoch's logged metrics average the batches from here "
                           "on only", epoch + 1)
            return
        for variable, value in zip(variables, saved["values"]):
            variable.assign(np.asarray(value, dtype=variable.dtype))

    def on_train_batch_begin(self, batch, logs=None):
        # Before batch b, the updates of the batches before it are done: a backup due at that
        # step is taken here, from counts, so that no batch end makes Keras wait for its step
        # (tfformer.train.callbacks.stops). The epoch's end backs up its last step, with its
        # history row.
        done, self._batches_done = self._batches_done, self._batches_done + 1
        if batch == 0 or done % self._accumulation:
            return
        step = self._fit_start + done // self._accumulation
        if step != self._last_backup_step and step % self.backup_every == 0:
            self._commit(step, self.history, mid_epoch=True)  # the step's weights, synced

    def on_epoch_end(self, epoch, logs=None):
        row = {"epoch": epoch + 1, "step": optimizer_step(self.model)}
        row.update({key: float(keras.ops.convert_to_numpy(value))
                    for key, value in (logs or {}).items()})
        if not math.isfinite(row.get("loss", 0.0)):
            logger.error("epoch %d: loss %s; not backed up", row["epoch"], row["loss"])
            return
        self._commit(row["step"], [r for r in self.history if r["epoch"] < row["epoch"]] + [row])
        self.publish()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

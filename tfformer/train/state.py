"""A training run's crash-safe state: backups of the weights and the optimizer, and the history.

Every file a kill can interrupt is written under a temporary name beside its target and renamed
over it (`os.replace`, atomic on POSIX): a reader finds the old file or the new one, never a torn
one. The backup's `state.json` is the commit point: it names the weights file of the last backup,
its optimizer step and the rows of every finished epoch. `metrics.csv` and the TensorBoard
scalars are views of that history, rewritten (CSV) or completed (TensorBoard) from it, so a kill
at any moment leaves neither missing, duplicated nor cut rows once the run resumes. The weights
files' names are `tfformer.train.checkpoints`', beside the epoch checkpoints'.
"""

from __future__ import annotations

import csv
import glob
import io
import logging
import os

import keras

logger = logging.getLogger(__name__)

STATE_FILENAME = "state.json"  # inside the run's backup/ (see tfformer.utils.run_dir)


def optimizer_step(model: keras.Model) -> int:
    """The optimizer's update count, also for a MirroredVariable (where int() fails)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def history_csv(rows: list[dict]) -> str:
    """The history as CSV: `epoch`, `step`, then every other column in order of appearance."""
    columns = ["epoch", "step"]
    for row in rows:
        columns += [key for key in row if key not in columns]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def logged_tensorboard_steps(directory: str) -> set[tuple[str, int]]:
    """(tag, step) pairs already in the event files under `directory`."""
    import tensorflow as tf  # only where TensorBoard is written (see RunState)

    logged = set()
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        try:
            for event in tf.compat.v1.train.summary_iterator(path):
                logged.update((value.tag, event.step) for value in event.summary.value)
        except tf.errors.DataLossError:
            pass  # the last record of a killed writer may be torn; what precedes it counts
    return logged



"""Workarounds for Keras / TensorFlow behaviour, in one place, under the `keras>=3.15,<4` pin.

Each names what it works around and the upstream issue; `tests/test_compat.py` fails when
Keras changes the behaviour, so an upgrade shows which workaround to revisit.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def build_from_int_ids(model: keras.Model) -> None:
    """`Model._maybe_symbolic_build` for a model whose inputs are int ids [batch, length].

    Under a tf.distribute strategy, Keras 3.15 (`backend/tensorflow/trainer.py`) reduces one
    distributed batch across replicas with "MEAN" just to learn shapes and dtypes: the int32
    token ids become float32 under MirroredStrategy, and MultiWorkerMirroredStrategy's reduce
    fails on them (keras-team/keras#21172: non-float inputs break distributed fit). Building
    from the fixed int32 spec needs no data at all.
    """
    if model._distribute_strategy is None:
        return  # Keras defers building to the first traced step
    ids = keras.KerasTensor((None, None), "int32")
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=((ids, ids), ids))


def reducible_logs(strategy: tf.distribute.Strategy, logs: dict) -> dict:
    """A train/test step's logs in a form Keras can reduce under `strategy`.

    Keras 3.15 reduces step outputs under MultiWorkerMirroredStrategy with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars (tensorflow#72388): give
    each logged scalar an axis of one, which that reduce then averages away.
    """
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return {name: tf.reshape(value, [1]) for name, value in logs.items()}
    return logs

"""Workarounds for Keras / TensorFlow behaviour, in one place, under the `keras>=3.15,<4` pin.

Each names what it works around and the upstream issue; `tests/test_compat.py` fails when
Keras changes the behaviour, so an upgrade shows which workaround to revisit. All of them are
about Keras' TensorFlow trainer under tf.distribute: on other backends `TrainerFixes` is empty
and nothing here imports TensorFlow.
"""

from __future__ import annotations

import keras

from tfformer.utils.backends import on_tensorflow


def build_from_int_ids(model: keras.Model) -> None:
    """`Model._maybe_symbolic_build` for a model whose inputs are int ids [batch, length].

    Under a tf.distribute strategy, Keras 3.15 (`backend/tensorflow/trainer.py`) reduces one
    distributed batch across replicas with "MEAN" just to learn shapes and dtypes: the int32
    token ids become float32 under MirroredStrategy, and MultiWorkerMirroredStrategy's reduce
    fails on them (keras-team/keras#21172: non-float inputs break distributed fit). Building
    from the fixed int32 spec needs no data at all.

    Without a strategy Keras defers building to the first traced step, which then creates the
    optimizer's variables inside the tf.function: TensorFlow traces the step twice and puts an
    initializer `cond` per variable into the graph, which slows the first step. Built here,
    before the trace, the step is traced once.
    """
    ids = keras.KerasTensor((None, None), "int32")
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=((ids, ids), ids))


def reducible_logs(strategy, logs: dict) -> dict:
    """A train/test step's logs in a form Keras can reduce under `strategy`.

    Keras 3.15 reduces step outputs under MultiWorkerMirroredStrategy with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars (tensorflow#72388): give
    each logged scalar an axis of one, which that reduce then averages away.
    """
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return {name: tf.reshape(value, [1]) for name, value in logs.items()}
    return logs


class _TensorFlowTrainerFixes:
    """The workarounds above, as overrides of a `keras.Model` subclass on TensorFlow."""

    def train_step(self, data):
        return reducible_logs(self.distribute_strategy, super().train_step(data))

    def test_step(self, data):
        return reducible_logs(self.distribute_strategy, super().test_step(data))

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        build_from_int_ids(self)  # Keras' own reduces a batch of ids to floats


class _NoFixes:
    """Other backends' trainers need none (and have other step signatures: JAX's is
    train_step(state, data))."""


# Mixed into `tfformer.model.transformer.Transformer` as its first base.
TrainerFixes = _TensorFlowTrainerFixes if on_tensorflow() else _NoFixes

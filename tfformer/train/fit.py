"""Putting the model, the objective and the optimizer together for `model.fit`."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Sequence

import keras

from tfformer.model.transformer import Transformer

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tfformer.train.callbacks import RunState


def fit_resumable(model: Transformer, train_data, *, run_state: "RunState", total_steps: int,
                  steps_per_epoch: int, validation_data=None, callbacks: Sequence = (),
                  verbose: int = 1) -> int:
    """Trains `model` until its optimizer has made `total_steps` updates, continuing from the
    last backup in `run_state` (a run killed at any moment loses at most `backup_every` updates).

    Epoch e (from 1) always ends at update e * steps_per_epoch / N (N: the optimizer's gradient
    accumulation): a run resumed in the middle of an epoch first finishes that epoch's remaining
    batches, so the history has the same epochs and steps however often the run was killed. The
    last epoch ends at `total_steps` and may be shorter.

    Args:
        model: a compiled Transformer (under its strategy's scope).
        train_data: a function of the number of batches already trained on that returns the
            endless training batches from there on (`RunBatches.train` of
            `tfformer.train.inputs`): a resumed run then goes on with the data order where it
            stopped. Or one endless dataset (make_dataset(repeat=True)), which a resumed run
            reads from its start.
        run_state: the run's RunState; it is put last among the callbacks.
        total_steps: optimizer updates to reach.
        steps_per_epoch: batches per epoch; a multiple of the gradient accumulation.
        validation_data: evaluated after each epoch (val_* in the history).
        callbacks: more callbacks, run before the RunState (e.g. DevBleu, KeepLastCheckpoints).
        verbose: Keras' progress output.

    Returns:
        the optimizer step reached (less than total_steps only if a callback stopped training).
    """
    from tfformer.train.state import optimizer_step

    accumulation = model.optimizer.gradient_accumulation_steps or 1
    if steps_per_epoch < 1 or steps_per_epoch % accumulation:
        raise ValueError(f"steps_per_epoch ({steps_per_epoch}) must be a positive multiple of "
                         f"the gradient accumulation ({accumulation})")
    updates_per_epoch = steps_per_epoch // accumulation
    step = run_state.restore(model)

    def batches_from(step: int):
        return train_data(step * accumulation) if callable(train_data) else train_data

    epochs = math.ceil(total_steps / updates_per_epoch)
    epoch, done_in_epoch = divmod(step, updates_per_epoch)
    fit_kwargs = dict(validation_data=validation_data, verbose=verbose, shuffle=False,
                      callbacks=fit_callbacks(total_steps, callbacks, run_state))
    waiting = waiting_callbacks(fit_kwargs["callbacks"])
    logger.info("fit: %s", f"Keras waits on each step for {', '.join(waiting)}" if waiting else
                "no callback waits on a step's results (Keras dispatches the next step at once "
                "where the backend allows: JAX)")
    if step < total_steps and done_in_epoch:
        # Finish the epoch the backup was taken in, so that epochs keep their true steps.
        model.fit(batches_from(step), initial_epoch=epoch, epochs=epoch + 1,
                  steps_per_epoch=(updates_per_epoch - done_in_epoch) * accumulation,
                  **fit_kwargs)
        epoch += 1
        if model.stop_training:
            return optimizer_step(model)
        step = optimizer_step(model)
    if step < total_steps:
        # A new stream from the step reached: fit() would read a dataset from its start again,
        # reshuffled (tf.data reshuffles each new iterator of a dataset).
        model.fit(batches_from(step), initial_epoch=epoch, epochs=epochs,
                  steps_per_epoch=steps_per_epoch, **fit_kwargs)
    return optimizer_step(model)


def fit_callbacks(total_steps: int, callbacks: Sequence, run_state: "RunState") -> list:
    """What `fit_resumable` gives `model.fit`: the exact step budget first, the run's state last
    (its epoch-end row takes the logs the others added)."""
    from tfformer.train.callbacks import StopAtStep

    return [StopAtStep(total_steps), *callbacks, run_state]


def waiting_callbacks(callbacks: Sequence) -> list[str]:
    """The callbacks for which Keras waits on each step's results before it dispatches the next
    one: a batch-end hook not marked `async_safe` (Keras 3's rule,
    `keras.callbacks.CallbackList`; on TensorFlow, Keras never dispatches asynchronously)."""
    base = keras.callbacks.Callback
    hooks = ("on_batch_end", "on_train_batch_end")
    return [type(callback).__name__ for callback in callbacks
            if not getattr(callback, "async_safe", False)
            and any(getattr(type(callback), hook) is not getattr(base, hook) for hook in hooks)]

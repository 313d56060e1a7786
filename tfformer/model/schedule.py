"""The learning-rate schedule and optimizer of §5.3."""

from __future__ import annotations

import keras
from keras import ops

from tfformer.model.adam import Adam
from tfformer.utils.checks import check_at_least


@keras.saving.register_keras_serializable(package="tfformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (§5.3, eq. 3).

    The paper's step_num counts optimizer updates, from 1. Keras calls the schedule with the
    optimizer's micro-batch counter, 0 before the first update; with gradient accumulation over
    N micro-batches it still counts micro-batches (keras `BaseOptimizer._get_current_learning_rate`
    passes `_iterations`, not `iterations`), so the schedule divides by N itself: update u
    (counter u*N - 1 while it is applied) uses step u. Step 0 would give 0 (no first update)
    from the second term and inf from the first.

    Args:
        d_model: model width.
        warmup_steps: updates of linear warmup (4000 in the paper).
        scale: constant factor (1.0 in the paper).
        micro_batches_per_update: the optimizer's `gradient_accumulation_steps` (1 without).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0,
                 micro_batches_per_update: int = 1):
        check_at_least("micro_batches_per_update", micro_batches_per_update)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.micro_batches_per_update = micro_batches_per_update

    def __call__(self, iterations):
        # int32 counts 2^31 updates; JAX has no int64 unless x64 is enabled.
        updates_done = ops.floor_divide(ops.cast(iterations, "int32"),
                                        self.micro_batches_per_update)
        step = ops.cast(updates_done, "float32") + 1.0
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(step), step * float(self.warmup_steps) ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale,
                "micro_batches_per_update": self.micro_batches_per_update}


def paper_optimizer(d_model: int, warmup_steps: int = 4000, scale: float = 1.0,
                    gradient_accumulation_steps: int | None = None,
                    **adam_kwargs) -> Adam:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) with the Noam schedule (§5.3).

    Args:
        d_model, warmup_steps, scale: the schedule's (see `NoamSchedule`).
        gradient_accumulation_steps: N > 1 averages the gradients of N batches per update;
            the schedule then still advances once per update.
        **adam_kwargs: passed to `Adam` (`keras.optimizers.Adam`'s arguments).
    """
    accumulation = gradient_accumulation_steps if gradient_accumulation_steps else None
    if accumulation == 1:
        accumulation = None  # Keras requires >= 2; one batch per update is no accumulation
    return Adam(
        learning_rate=NoamSchedule(d_model, warmup_steps, scale,
                                   micro_batches_per_update=accumulation or 1),
        beta_1=0.9, beta_2=0.98, epsilon=1e-9, gradient_accumulation_steps=accumulation,
        **adam_kwargs)

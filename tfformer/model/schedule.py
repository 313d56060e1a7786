"""The learning-rate schedule and optimizer of §5.3, and the schedules of continued training.

- "noam": §5.3's, eq. 3 (`NoamSchedule`), what a new model trains with.
- "inverse_sqrt": linear warmup to a peak rate, then peak * sqrt(warmup / step)
  (`InverseSqrtSchedule`): fairseq's `inverse_sqrt` and Marian's `--lr-warmup` with
  `--lr-decay-inv-sqrt`, which OPUS-MT's fine-tuning recipe runs (OPUS-MT-train's
  finetune/Makefile: peak 3e-4).
- "constant": one rate throughout.

The step counting is Keras': the optimizer's micro-batch counter, divided by the gradient
accumulation (`NoamSchedule` says why).
"""

from __future__ import annotations

import keras
from keras import ops

from tfformer.config import LR_SCHEDULES, PAPER_WARMUP_STEPS
from tfformer.model.adam import Adam
from tfformer.utils.checks import check_at_least


def update_number(iterations, micro_batches_per_update: int):
    """float32: the update (from 1) that Keras' micro-batch counter `iterations` applies."""
    # int32 counts 2^31 updates; JAX has no int64 unless x64 is enabled.
    updates_done = ops.floor_divide(ops.cast(iterations, "int32"), micro_batches_per_update)
    return ops.cast(updates_done, "float32") + 1.0


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

    def __init__(self, d_model: int, warmup_steps: int = PAPER_WARMUP_STEPS, scale: float = 1.0,
                 micro_batches_per_update: int = 1):
        check_at_least("micro_batches_per_update", micro_batches_per_update)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.micro_batches_per_update = micro_batches_per_update

    def __call__(self, iterations):
        step = update_number(iterations, self.micro_batches_per_update)
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(step), step * float(self.warmup_steps) ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale,
                "micro_batches_per_update": self.micro_batches_per_update}


@keras.saving.register_keras_serializable(package="tfformer")
class InverseSqrtSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = peak * min(step / warmup_steps, sqrt(warmup_steps / step)), step counting
    updates from 1: linear warmup to `peak` at `warmup_steps`, then inverse-square-root decay.

    Args:
        peak: the rate at the end of warmup.
        warmup_steps: updates of linear warmup (0: none, decay from `peak` at the first).
        micro_batches_per_update: the optimizer's `gradient_accumulation_steps` (1 without).
    """

    def __init__(self, peak: float, warmup_steps: int, micro_batches_per_update: int = 1):
        check_at_least("micro_batches_per_update", micro_batches_per_update)
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.micro_batches_per_update = micro_batches_per_update

    def __call__(self, iterations):
        step = update_number(iterations, self.micro_batches_per_update)
        warmup = float(max(self.warmup_steps, 1))
        return self.peak * ops.minimum(step / warmup, ops.sqrt(warmup / step))

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "micro_batches_per_update": self.micro_batches_per_update}


def make_schedule(name: str, *, d_model: int, warmup_steps: int, scale: float = 1.0,
                  learning_rate: float | None = None, micro_batches_per_update: int = 1):
    """The schedule `name` (`LR_SCHEDULES`): noam takes d_model, warmup_steps and scale; the
    others take their peak `learning_rate`, inverse_sqrt its warmup too."""
    if name == "noam":
        return NoamSchedule(d_model, warmup_steps, scale, micro_batches_per_update)
    if name not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {name!r}")
    if learning_rate is None or not learning_rate > 0:
        raise ValueError(f"lr_schedule {name} needs a learning_rate > 0, got {learning_rate}")
    if name == "constant":
        return float(learning_rate)
    return InverseSqrtSchedule(learning_rate, warmup_steps, micro_batches_per_update)


def paper_optimizer(d_model: int, warmup_steps: int = PAPER_WARMUP_STEPS, scale: float = 1.0,
                    gradient_accumulation_steps: int | None = None, *,
                    schedule: str = "noam", learning_rate: float | None = None,
                    **adam_kwargs) -> Adam:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) with the Noam schedule (§5.3), or another of
    `LR_SCHEDULES` (`make_schedule`).

    Args:
        d_model, warmup_steps, scale: the schedule's (see `NoamSchedule`).
        gradient_accumulation_steps: N > 1 averages the gradients of N batches per update;
            the schedule then still advances once per update.
        schedule, learning_rate: the schedule's name and the peak rate of the others than noam.
        **adam_kwargs: passed to `Adam` (`keras.optimizers.Adam`'s arguments).
    """
    accumulation = gradient_accumulation_steps if gradient_accumulation_steps else None
    if accumulation == 1:
        accumulation = None  # Keras requires >= 2; one batch per update is no accumulation
    return Adam(
        learning_rate=make_schedule(schedule, d_model=d_model, warmup_steps=warmup_steps,
                                    scale=scale, learning_rate=learning_rate,
                                    micro_batches_per_update=accumulation or 1),
        beta_1=0.9, beta_2=0.98, epsilon=1e-9, gradient_accumulation_steps=accumulation,
        **adam_kwargs)

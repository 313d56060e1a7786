"""The learning-rate schedule and optimizer of §5.3."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="tfformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (§5.3, eq. 3).

    Keras calls the schedule with the optimizer's `iterations`, which is 0 before the first
    update; the paper counts steps from 1, so update k (k = iterations + 1) uses step k. Step 0
    would give 0 (no first update) from the second term and inf from the first.

    Args:
        d_model: model width.
        warmup_steps: steps of linear warmup (4000 in the paper).
        scale: constant factor (1.0 in the paper).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, iterations):
        step = tf.cast(iterations, tf.float32) + 1.0
        return (self.scale * self.d_model ** -0.5
                * tf.minimum(tf.math.rsqrt(step), step * float(self.warmup_steps) ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def paper_optimizer(d_model: int, warmup_steps: int = 4000, scale: float = 1.0,
                    **adam_kwargs) -> keras.optimizers.Adam:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) with the Noam schedule (§5.3).

    Extra keyword arguments go to `keras.optimizers.Adam` (e.g. gradient_accumulation_steps).
    """
    return keras.optimizers.Adam(
        learning_rate=NoamSchedule(d_model, warmup_steps, scale),
        beta_1=0.9, beta_2=0.98, epsilon=1e-9, **adam_kwargs)

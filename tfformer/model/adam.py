"""The paper's optimizer, Adam (§5.3), as Keras computes it, in one op per variable on
TensorFlow."""

from __future__ import annotations

import keras
from keras import ops

from tfformer.model.layers.kernels import ON_TENSORFLOW

if ON_TENSORFLOW:
    import tensorflow as tf


@keras.saving.register_keras_serializable(package="tfformer")
class Adam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` (every argument, the same variables and the same update), whose
    TensorFlow update of a variable is one fused op.

    Keras 3 writes Adam's update in `keras.ops`: about fifteen ops per variable, each traced into
    the train step's graph and each run as a kernel of its own at every step. TensorFlow's
    ResourceApplyAdam does the same arithmetic in one op (`apply_adam`), so the train
    step traces faster and runs fewer ops. Elsewhere (JAX, amsgrad, float16 or bfloat16
    variables) Keras' own update runs; under XLA both forms fuse alike.
    """

    def update_step(self, gradient, variable, learning_rate):
        if not fused_adam_applies(variable, self.amsgrad):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        local_step = ops.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        apply_adam(
            variable, self._momentums[index], self._velocities[index], gradient,
            learning_rate=learning_rate,
            beta_1_power=ops.power(ops.cast(self.beta_1, dtype), local_step),
            beta_2_power=ops.power(ops.cast(self.beta_2, dtype), local_step),
            beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)


def fused_adam_applies(variable, amsgrad: bool) -> bool:
    """Whether `apply_adam` can update `variable`: on TensorFlow, for Adam without amsgrad, and
    for float32 or float64 variables (mixed precision keeps its variables in float32)."""
    return ON_TENSORFLOW and not amsgrad and \
        keras.backend.standardize_dtype(variable.dtype) in ("float32", "float64")


def apply_adam(variable, m, v, gradient, learning_rate, beta_1_power, beta_2_power, beta_1,
               beta_2, epsilon) -> None:
    """Keras' Adam update of one variable in one TensorFlow op, ResourceApplyAdam:
    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1);
    v += (g^2 - v)(1 - beta_2); variable -= alpha * m / (sqrt(v) + epsilon): the arithmetic of
    `keras.optimizers.Adam.update_step`, in the same order. Where `fused_adam_applies`."""
    def handle(x):
        # A keras.Variable holds a tf.Variable; inside tf.distribute's update() the handle of a
        # mirrored one is the replica's own.
        return (x.value if isinstance(x, keras.Variable) else x).handle

    dtype = variable.dtype
    if isinstance(gradient, tf.IndexedSlices):  # an embedding's rows: Keras' update densifies
        gradient = tf.convert_to_tensor(gradient)
    tf.raw_ops.ResourceApplyAdam(
        var=handle(variable), m=handle(m), v=handle(v),
        beta1_power=tf.cast(beta_1_power, dtype), beta2_power=tf.cast(beta_2_power, dtype),
        lr=tf.cast(learning_rate, dtype), beta1=tf.constant(beta_1, dtype),
        beta2=tf.constant(beta_2, dtype), epsilon=tf.constant(epsilon, dtype),
        grad=tf.cast(gradient, dtype))

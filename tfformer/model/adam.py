"""The paper's optimizer, Adam (§5.3), as Keras computes it, in one op per variable on
TensorFlow."""

from __future__ import annotations

import keras
from keras import ops

from tfformer.model.layers import kernels


@keras.saving.register_keras_serializable(package="tfformer")
class Adam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` (every argument, the same variables and the same update), whose
    TensorFlow update of a variable is one fused op.

    Keras 3 writes Adam's update in `keras.ops`: about fifteen ops per variable, each traced into
    the train step's graph and each run as a kernel of its own at every step. TensorFlow's
    ResourceApplyAdam does the same arithmetic in one op (`kernels.apply_adam`), so the train
    step traces faster and runs fewer ops. Elsewhere (JAX, amsgrad, float16 or bfloat16
    variables) Keras' own update runs; under XLA both forms fuse alike.
    """

    def update_step(self, gradient, variable, learning_rate):
        if not kernels.fused_adam_applies(variable, self.amsgrad):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        local_step = ops.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        kernels.apply_adam(
            variable, self._momentums[index], self._velocities[index], gradient,
            learning_rate=learning_rate,
            beta_1_power=ops.power(ops.cast(self.beta_1, dtype), local_step),
            beta_2_power=ops.power(ops.cast(self.beta_2, dtype), local_step),
            beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)

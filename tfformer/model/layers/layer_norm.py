"""Layer normalization over the model dimension (Ba et al., 2016), as §3.1's LayerNorm."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="tfformer")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, with Keras' arithmetic, whose gamma
    and beta broadcast as they are.

    Keras 3.15 keeps the default axis -1 as [-1]; `keras.ops.layer_normalization` then finds that
    -1 is not `ndims - 1` and reshapes gamma and beta to [1, ..., d] at every call: two Reshape
    ops per layer norm, in every training step and every decoding step. Built, this layer names
    the last axis from the front, which needs no reshape (`tests/test_compat.py` checks that
    Keras still reshapes for -1). The weights, their names and the outputs are Keras'.
    """

    def build(self, input_shape):
        super().build(input_shape)
        self.axis = [len(input_shape) - 1]

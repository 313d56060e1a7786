"""Position-wise feed-forward network (§3.3)."""

from __future__ import annotations

import keras
from keras import ops

from tfformer.model.layers import kernels

# The activations of TransformerConfig.activation. gelu is the exact (erf) form, as Hugging
# Face's "gelu" and PyTorch's default; swish is SiLU.
ACTIVATIONS = {
    "relu": ops.relu,
    "swish": ops.silu,
    "gelu": lambda x: ops.gelu(x, approximate=False),
}


@keras.saving.register_keras_serializable(package="tfformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike (§3.3, eq. 2).

    Args:
        d_model: input and output width.
        d_ff: inner width.
        activation: "relu" (the paper's max(0, .)), "swish" (x * sigmoid(x)) or "gelu" (exact).

    Call arguments:
        inputs: [batch, T, d_model].

    Returns:
        [batch, T, d_model].
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", **kwargs):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.d_model = d_model
        self.d_ff = d_ff
        self.activation = activation
        # The Dense layers only hold W_1, b_1 and W_2, b_2 (the usual .keras layout); `call`
        # applies them with `affine` on 2-D rows, which oneDNN fuses (see layers/kernels.py).
        self.inner = keras.layers.Dense(d_ff, name="inner")
        self.outer = keras.layers.Dense(d_model, name="outer")

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)
        self.outer.build(tuple(inputs_shape[:-1]) + (self.d_ff,))
        super().build(inputs_shape)

    def call(self, inputs):
        rows = ops.reshape(inputs, (-1, self.d_model))
        hidden = ACTIVATIONS[self.activation](
            kernels.affine(rows, self.inner.kernel, self.inner.bias))
        return kernels.rows_as(kernels.affine(hidden, self.outer.kernel, self.outer.bias),
                               inputs)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "d_ff": self.d_ff,
                "activation": self.activation}


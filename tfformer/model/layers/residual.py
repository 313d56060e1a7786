"""The residual connection around every sub-layer (§3.1, §5.4)."""

from __future__ import annotations

import keras

from tfformer.model.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="tfformer")
class SublayerConnection(keras.layers.Layer):
    """The residual connection, dropout and LayerNorm around one sub-layer.

    post (the paper, §3.1 and §5.4): LayerNorm(x + Dropout(Sublayer(x))).
    pre: x + Dropout(Sublayer(LayerNorm(x))); the stack then ends with its own LayerNorm.
    Used as `y = sublayer(conn.sublayer_input(x)); x = conn(x, y)`, so a sub-layer that also
    returns a cache keeps its own signature.

    Args:
        norm: "post" or "pre".
        dropout: P_drop on the sub-layer output.
        epsilon: LayerNorm epsilon.

    Call arguments:
        inputs: the residual stream x, [batch, T, d_model].
        sublayer_output: Sublayer(...) for this x, same shape.
        training: whether dropout is active.

    Returns:
        the new residual stream.
    """

    def __init__(self, norm: str = "post", dropout: float = 0.1, epsilon: float = 1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self.norm = norm
        self.dropout = dropout
        self.epsilon = epsilon
        self.layer_norm = LayerNorm(epsilon=epsilon, name="layer_norm")
        self.dropout_layer = keras.layers.Dropout(dropout)

    def build(self, inputs_shape, sublayer_output_shape=None):
        self.layer_norm.build(inputs_shape)
        super().build(inputs_shape)

    def sublayer_input(self, x):
        return self.layer_norm(x) if self.norm == "pre" else x

    def call(self, inputs, sublayer_output, training=None):
        x = inputs + self.dropout_layer(sublayer_output, training=training)
        return self.layer_norm(x) if self.norm == "post" else x

    def compute_output_shape(self, inputs_shape, sublayer_output_shape=None):
        return inputs_shape

    def get_config(self):
        return {**super().get_config(), "norm": self.norm, "dropout": self.dropout,
                "epsilon": self.epsilon}

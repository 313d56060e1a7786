"""The encoder: a stack of N identical layers of self-attention and feed-forward (§3.1)."""

from __future__ import annotations

import keras

from tfformer.layers.attention import MultiHeadAttention
from tfformer.layers.feed_forward import PositionwiseFeedForward
from tfformer.layers.residual import SublayerConnection
from tfformer.layers.stack import LayerStack, TransformerLayerBase


@keras.saving.register_keras_serializable(package="tfformer")
class EncoderLayer(TransformerLayerBase):
    """Multi-head self-attention then a position-wise FFN, each in a residual connection (§3.1).

    Args: as `TransformerLayerBase` (d_model, num_heads, d_ff, dropout, attention_dropout, norm,
        epsilon).

    Call arguments:
        inputs: [batch, T, d_model].
        attention_mask: boolean [batch, 1 or T, T]; False hides a key (padding).
        training: whether dropout is active.

    Returns:
        [batch, T, d_model].
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, norm: str = "post", epsilon: float = 1e-6,
                 **kwargs):
        super().__init__(d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon,
                         **kwargs)
        self.self_attention = MultiHeadAttention(num_heads, d_model // num_heads,
                                                 attention_dropout, name="self_attention")
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, name="feed_forward")
        self.attention_connection = SublayerConnection(norm, dropout, epsilon,
                                                       name="attention_connection")
        self.feed_forward_connection = SublayerConnection(norm, dropout, epsilon,
                                                          name="feed_forward_connection")

    def build(self, inputs_shape):
        self.self_attention.build(inputs_shape)
        self.feed_forward.build(inputs_shape)
        self.attention_connection.build(inputs_shape)
        self.feed_forward_connection.build(inputs_shape)
        super().build(inputs_shape)

    def call(self, inputs, attention_mask=None, training=None):
        h = self.attention_connection.sublayer_input(inputs)
        x = self.attention_connection(
            inputs, self.self_attention(h, h, attention_mask, training=training), training=training)
        h = self.feed_forward_connection.sublayer_input(x)
        return self.feed_forward_connection(x, self.feed_forward(h), training=training)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


@keras.saving.register_keras_serializable(package="tfformer")
class Encoder(LayerStack):
    """Positions + dropout over the (already scaled) embeddings, then N encoder layers (§3.1).

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon: as EncoderLayer.
        positional: "sinusoidal" or "learned".
        max_length: number of learned positions.

    Call arguments:
        embeddings: [batch, T, d_model] token embeddings, already scaled by sqrt(d_model).
        attention_mask: boolean [batch, 1, T], False at pad positions.
        training: whether dropout is active.

    Returns:
        [batch, T, d_model], the memory the decoder attends to.
    """

    layer_class = EncoderLayer

    def build(self, embeddings_shape):
        self.build_stack(embeddings_shape)
        super().build(embeddings_shape)

    def call(self, embeddings, attention_mask=None, training=None):
        x = self.embed(embeddings, training=training)
        for layer in self.stack:
            x = layer(x, attention_mask, training=training)
        return self.finish(x)

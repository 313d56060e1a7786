"""The encoder: a stack of N identical layers of self-attention and feed-forward (§3.1)."""

from __future__ import annotations

import keras

from tfformer.model.layers.attention import MultiHeadAttention
from tfformer.model.layers.feed_forward import PositionwiseFeedForward
from tfformer.model.layers.residual import SublayerConnection
from tfformer.model.layers.stack import LayerStack, TransformerLayerBase


@keras.saving.register_keras_serializable(package="tfformer")
class EncoderLayer(TransformerLayerBase):
    """Multi-head self-attention then a position-wise FFN, each in a residual connection (§3.1).

    Args: as `TransformerLayerBase` (d_model, num_heads, d_ff, dropout, attention_dropout, norm,
        epsilon, activation).

    Call arguments:
        inputs: [batch, T, d_model].
        attention_mask: boolean [batch, 1 or T, T]; False hides a key (padding).
        return_attention_scores: also return the self-attention weights [batch, h, T, T].
        training: whether dropout is active.

    Returns:
        [batch, T, d_model], or (that, weights) with `return_attention_scores`.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, norm: str = "post", epsilon: float = 1e-6,
                 activation: str = "relu", **kwargs):
        super().__init__(d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon,
                         activation, **kwargs)
        self.self_attention = MultiHeadAttention(num_heads, d_model // num_heads,
                                                 attention_dropout, name="self_attention")
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, activation,
                                                    name="feed_forward")
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

    def call(self, inputs, attention_mask=None, return_attention_scores=False, training=None):
        h = self.attention_connection.sublayer_input(inputs)
        y = self.self_attention(h, h, attention_mask,
                                return_attention_scores=return_attention_scores,
                                training=training)
        if return_attention_scores:
            y, weights = y
        x = self.attention_connection(inputs, y, training=training)
        h = self.feed_forward_connection.sublayer_input(x)
        x = self.feed_forward_connection(x, self.feed_forward(h), training=training)
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


@keras.saving.register_keras_serializable(package="tfformer")
class Encoder(LayerStack):
    """Positions + dropout over the (already scaled) embeddings, then N encoder layers (§3.1).

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon, activation: as
            EncoderLayer.
        positional: "sinusoidal" or "learned".
        max_length: number of learned positions.

    Call arguments:
        embeddings: [batch, T, d_model] token embeddings, already scaled by sqrt(d_model).
        attention_mask: boolean [batch, 1, T], False at pad positions (or [batch, T, T] for
            rows packed with several pairs: `tfformer.model.layers.segment_mask`).
        return_attention_scores: also return each layer's self-attention weights.
        training: whether dropout is active.
        positions: None (0, 1, ... in every row), or each token's position [batch, T] (packed
            rows: `tfformer.model.layers.segment_positions`).

    Returns:
        [batch, T, d_model], the memory the decoder attends to; with
        `return_attention_scores`, (that, a list of N weights [batch, h, T, T]).
    """

    layer_class = EncoderLayer

    def build(self, embeddings_shape):
        self.build_stack(embeddings_shape)
        super().build(embeddings_shape)

    def call(self, embeddings, attention_mask=None, return_attention_scores=False,
             training=None, positions=None):
        x = self.embed(embeddings, training=training, positions=positions)
        weights = []
        for layer in self.stack:
            x = layer(x, attention_mask, return_attention_scores=return_attention_scores,
                      training=training)
            if return_attention_scores:
                x, layer_weights = x
                weights.append(layer_weights)
        x = self.finish(x)
        return (x, weights) if return_attention_scores else x

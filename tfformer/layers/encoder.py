"""The encoder: a stack of N identical layers of self-attention and feed-forward (§3.1)."""

from __future__ import annotations

import keras

from tfformer.layers.attention import MultiHeadAttention
from tfformer.layers.embedding import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from tfformer.layers.feed_forward import PositionwiseFeedForward
from tfformer.layers.residual import SublayerConnection


def positional_layer(positional: str, max_length: int, name: str) -> keras.layers.Layer:
    """The §3.5 sinusoidal encoding, or learned positions (Table 3 row E)."""
    if positional == "learned":
        return LearnedPositionalEmbedding(max_length, name=name)
    return SinusoidalPositionalEncoding(name=name)


@keras.saving.register_keras_serializable(package="tfformer")
class EncoderLayer(keras.layers.Layer):
    """Multi-head self-attention then a position-wise FFN, each in a residual connection (§3.1).

    Args:
        d_model, num_heads, d_ff: widths (§3.2.2, §3.3).
        dropout: residual dropout P_drop (§5.4).
        attention_dropout: dropout on attention weights.
        norm: "post" (paper) or "pre".
        epsilon: LayerNorm epsilon.

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
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.dropout, self.attention_dropout = dropout, attention_dropout
        self.norm, self.epsilon = norm, epsilon
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

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "d_ff": self.d_ff, "dropout": self.dropout,
                "attention_dropout": self.attention_dropout, "norm": self.norm,
                "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="tfformer")
class Encoder(keras.layers.Layer):
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

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0, norm: str = "post",
                 epsilon: float = 1e-6, positional: str = "sinusoidal", max_length: int = 256,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_layers, self.d_model, self.num_heads, self.d_ff = num_layers, d_model, num_heads, d_ff
        self.dropout, self.attention_dropout = dropout, attention_dropout
        self.norm, self.epsilon = norm, epsilon
        self.positional, self.max_length = positional, max_length
        self.positions = positional_layer(positional, max_length, "positions")
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.stack = [EncoderLayer(d_model, num_heads, d_ff, dropout, attention_dropout, norm,
                                    epsilon, name=f"layer_{i}") for i in range(num_layers)]
        # Pre-norm leaves the residual stream unnormalised: one last LayerNorm closes the stack.
        self.final_norm = keras.layers.LayerNormalization(epsilon=epsilon, name="final_norm") \
            if norm == "pre" else None

    def build(self, embeddings_shape):
        self.positions.build(embeddings_shape)
        for layer in self.stack:
            layer.build(embeddings_shape)
        if self.final_norm is not None:
            self.final_norm.build(embeddings_shape)
        super().build(embeddings_shape)

    def call(self, embeddings, attention_mask=None, training=None):
        x = self.embedding_dropout(self.positions(embeddings), training=training)
        for layer in self.stack:
            x = layer(x, attention_mask, training=training)
        return self.final_norm(x) if self.final_norm is not None else x

    def compute_output_shape(self, embeddings_shape):
        return embeddings_shape

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "d_model": self.d_model,
                "num_heads": self.num_heads, "d_ff": self.d_ff, "dropout": self.dropout,
                "attention_dropout": self.attention_dropout, "norm": self.norm,
                "epsilon": self.epsilon, "positional": self.positional,
                "max_length": self.max_length}

"""What the encoder and decoder share (§3.1): layer hyper-parameters, and the stack around the
N identical layers (positions and dropout over the embeddings; a final LayerNorm for pre-norm)."""

from __future__ import annotations

import keras

from tfformer.model.layers.embedding import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)
from tfformer.model.layers.layer_norm import LayerNorm


class TransformerLayerBase(keras.layers.Layer):
    """Arguments and config shared by EncoderLayer and DecoderLayer.

    Args:
        d_model, num_heads, d_ff: widths (§3.2.2, §3.3).
        dropout: residual dropout P_drop (§5.4).
        attention_dropout: dropout on attention weights.
        norm: "post" (paper) or "pre".
        epsilon: LayerNorm epsilon.
        activation: the feed-forward activation ("relu", the paper's; "swish"; "gelu").
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, norm: str = "post", epsilon: float = 1e-6,
                 activation: str = "relu", **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.dropout, self.attention_dropout = dropout, attention_dropout
        self.norm, self.epsilon, self.activation = norm, epsilon, activation

    def layer_arguments(self) -> dict:
        """The keyword arguments every encoder / decoder layer of this width takes."""
        return {"d_model": self.d_model, "num_heads": self.num_heads, "d_ff": self.d_ff,
                "dropout": self.dropout, "attention_dropout": self.attention_dropout,
                "norm": self.norm, "epsilon": self.epsilon, "activation": self.activation}

    def get_config(self):
        return {**super().get_config(), **self.layer_arguments()}


class LayerStack(TransformerLayerBase):
    """N layers of `layer_class` with positions + dropout before and, for pre-norm, a LayerNorm
    after. Subclasses set `layer_class` and write `build` and `call`.

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon, activation: as
            the layers'.
        positional: "sinusoidal" (§3.5) or "learned" (Table 3 row E).
        max_length: number of learned positions.
        sinusoid_layout: "interleaved" (§3.5) or "halves" (`sinusoidal_table`).
    """

    layer_class: type = None

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0, norm: str = "post",
                 epsilon: float = 1e-6, positional: str = "sinusoidal", max_length: int = 256,
                 activation: str = "relu", sinusoid_layout: str = "interleaved", **kwargs):
        super().__init__(d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon,
                         activation, **kwargs)
        self.num_layers, self.positional, self.max_length = num_layers, positional, max_length
        self.sinusoid_layout = sinusoid_layout
        self.positions = (LearnedPositionalEmbedding(max_length, name="positions")
                          if positional == "learned" else
                          SinusoidalPositionalEncoding(sinusoid_layout, name="positions"))
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.stack = [self.layer_class(**self.layer_arguments(), name=f"layer_{i}")
                      for i in range(num_layers)]
        # Pre-norm leaves the residual stream unnormalised: one last LayerNorm closes the stack.
        self.final_norm = LayerNorm(epsilon=epsilon, name="final_norm") \
            if norm == "pre" else None

    def build_stack(self, embeddings_shape, *layer_shapes):
        self.positions.build(embeddings_shape)
        for layer in self.stack:
            layer.build(embeddings_shape, *layer_shapes)
        if self.final_norm is not None:
            self.final_norm.build(embeddings_shape)

    def embed(self, embeddings, start=0, training=None, positions=None):
        """Adds positions (from `start`, or each token's own `positions` [batch, T]) and
        applies the embedding dropout (§5.4)."""
        return self.embedding_dropout(self.positions(embeddings, start=start, positions=positions),
                                      training=training)

    def finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def compute_output_shape(self, embeddings_shape, *args):
        return embeddings_shape

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers,
                "positional": self.positional, "max_length": self.max_length,
                "sinusoid_layout": self.sinusoid_layout}

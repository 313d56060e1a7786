"""The Transformer's building blocks as Keras layers (paper §3)."""

from tfformer.model.layers.attention import (
                                       MultiHeadAttention,
                                       ScaledDotProductAttention,
                                       causal_mask,
                                       padding_mask,
                                       segment_mask,
                                       segment_positions,
)
from tfformer.model.layers.decoder import Decoder, DecoderLayer
from tfformer.model.layers.embedding import (
                                       LearnedPositionalEmbedding,
                                       SharedEmbedding,
                                       SinusoidalPositionalEncoding,
                                       sinusoidal_table,
)
from tfformer.model.layers.encoder import Encoder, EncoderLayer
from tfformer.model.layers.feed_forward import PositionwiseFeedForward
from tfformer.model.layers.residual import SublayerConnection

__all__ = [
    "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "LearnedPositionalEmbedding",
    "MultiHeadAttention", "PositionwiseFeedForward", "ScaledDotProductAttention",
    "SharedEmbedding", "SinusoidalPositionalEncoding", "SublayerConnection", "causal_mask",
    "padding_mask", "segment_mask", "segment_positions", "sinusoidal_table",
]

"""The Transformer's building blocks as Keras layers (paper §3)."""

from tfformer.layers.attention import (
                                       MultiHeadAttention,
                                       ScaledDotProductAttention,
                                       causal_mask,
                                       padding_mask,
                                       segment_mask,
                                       segment_positions,
)
from tfformer.layers.decoder import Decoder, DecoderLayer
from tfformer.layers.embedding import (
                                       LearnedPositionalEmbedding,
                                       SharedEmbedding,
                                       SinusoidalPositionalEncoding,
                                       sinusoidal_table,
)
from tfformer.layers.encoder import Encoder, EncoderLayer
from tfformer.layers.feed_forward import PositionwiseFeedForward
from tfformer.layers.residual import SublayerConnection

__all__ = [
    "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "LearnedPositionalEmbedding",
    "MultiHeadAttention", "PositionwiseFeedForward", "ScaledDotProductAttention",
    "SharedEmbedding", "SinusoidalPositionalEncoding", "SublayerConnection", "causal_mask",
    "padding_mask", "segment_mask", "segment_positions", "sinusoidal_table",
]

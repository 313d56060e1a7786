"""The decoder: N layers of masked self-attention, encoder-decoder attention and FFN (§3.1).

One decoder serves training (whole target at once, causal mask), search (one token per step
with a key/value cache) and the exported graph. A cache is a list with one dict per layer, its
tensors in the heads layout of `tfformer.model.layers.kernels` ([batch, h, T, d_k] on TensorFlow,
[batch, T, h, d_k] elsewhere):
    {"self_keys", "self_values"}: T_past positions, grown by one step per call;
    {"cross_keys", "cross_values"}: T_source positions, projected once from the memory.
"""

from __future__ import annotations

import keras
from keras import ops

from tfformer.model.layers import kernels
from tfformer.model.layers.attention import MultiHeadAttention
from tfformer.model.layers.feed_forward import PositionwiseFeedForward
from tfformer.model.layers.residual import SublayerConnection
from tfformer.model.layers.stack import LayerStack, TransformerLayerBase


@keras.saving.register_keras_serializable(package="tfformer")
class DecoderLayer(TransformerLayerBase):
    """Masked self-attention, attention over the encoder output, and an FFN (§3.1).

    Args:
        d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon, activation: as
            EncoderLayer.

    Call arguments:
        inputs: [batch, T, d_model], the target positions to compute.
        memory: [batch, S, d_model] encoder output; may be None when `cache` is given.
        self_attention_mask: boolean [batch, T, T_past + T]; causal (and padding) mask.
        cross_attention_mask: boolean [batch, 1, S]; False at source pads.
        cache: None, or this layer's cache dict (see module docstring).
        cache_index: with a fixed-capacity cache, the position of the first new token.
        return_attention_scores: also return the attention weights (without a cache only).
        training: whether dropout is active.

    Returns:
        [batch, T, d_model], and the updated cache dict when `cache` is given; with
        `return_attention_scores`, (that, {"self": [batch, h, T, T], "cross": [batch, h, T, S]}).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, norm: str = "post", epsilon: float = 1e-6,
                 activation: str = "relu", **kwargs):
        super().__init__(d_model, num_heads, d_ff, dropout, attention_dropout, norm, epsilon,
                         activation, **kwargs)
        key_dim = d_model // num_heads
        self.self_attention = MultiHeadAttention(num_heads, key_dim, attention_dropout,
                                                 name="self_attention")
        self.cross_attention = MultiHeadAttention(num_heads, key_dim, attention_dropout,
                                                  name="cross_attention")
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, activation,
                                                    name="feed_forward")
        self.self_attention_connection, self.cross_attention_connection, \
            self.feed_forward_connection = [
                SublayerConnection(norm, dropout, epsilon, name=f"{name}_connection")
                for name in ("self_attention", "cross_attention", "feed_forward")]

    def build(self, inputs_shape, memory_shape=None):
        self.self_attention.build(inputs_shape)
        self.cross_attention.build(inputs_shape, memory_shape or inputs_shape)
        self.feed_forward.build(inputs_shape)
        for connection in (self.self_attention_connection, self.cross_attention_connection,
                           self.feed_forward_connection):
            connection.build(inputs_shape)
        super().build(inputs_shape)

    def init_cache(self, memory, capacity: int | None = None):
        """This layer's cache before the first step: an empty self-attention part (or one of
        `capacity` zero positions, written in place), and the projected memory."""
        cross_keys, cross_values = self.cross_attention.project_key_value(memory)
        shape = list(ops.shape(cross_keys))
        shape[kernels.SEQUENCE_AXIS] = capacity or 0
        empty = ops.zeros(shape, cross_keys.dtype)
        return {"self_keys": empty, "self_values": empty,
                "cross_keys": cross_keys, "cross_values": cross_values}

    def call(self, inputs, memory=None, self_attention_mask=None, cross_attention_mask=None,
             cache=None, cache_index=None, return_attention_scores=False, training=None):
        if return_attention_scores and cache is not None:
            raise ValueError("return_attention_scores works without a cache (teacher forcing)")
        weights = {}
        h = self.self_attention_connection.sublayer_input(inputs)
        if cache is None:
            y = self.self_attention(h, h, self_attention_mask,
                                    return_attention_scores=return_attention_scores,
                                    training=training)
            if return_attention_scores:
                y, weights["self"] = y
        else:
            y, (keys, values) = self.self_attention(
                h, h, self_attention_mask, cache=(cache["self_keys"], cache["self_values"]),
                cache_index=cache_index, training=training)
        x = self.self_attention_connection(inputs, y, training=training)

        h = self.cross_attention_connection.sublayer_input(x)
        if cache is None:
            y = self.cross_attention(h, memory, cross_attention_mask,
                                     return_attention_scores=return_attention_scores,
                                     training=training)
            if return_attention_scores:
                y, weights["cross"] = y
        else:
            y, _ = self.cross_attention(
                h, None, cross_attention_mask,
                cache=(cache["cross_keys"], cache["cross_values"]), training=training)
        x = self.cross_attention_connection(x, y, training=training)

        h = self.feed_forward_connection.sublayer_input(x)
        x = self.feed_forward_connection(x, self.feed_forward(h), training=training)
        if return_attention_scores:
            return x, weights
        if cache is None:
            return x
        return x, {**cache, "self_keys": keys, "self_values": values}

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape


@keras.saving.register_keras_serializable(package="tfformer")
class Decoder(LayerStack):
    """Positions + dropout over the (already scaled) target embeddings, then N decoder layers.

    Args: as `Encoder`.

    Call arguments:
        embeddings: [batch, T, d_model] target embeddings, already scaled by sqrt(d_model).
        memory: [batch, S, d_model] encoder output (unused when `cache` is given).
        self_attention_mask: boolean [batch, T, T_past + T] (see DecoderLayer).
        cross_attention_mask: boolean [batch, 1, S] (or [batch, T, S] for packed rows).
        cache: None, or the list of per-layer caches from `init_cache` / a previous call.
        cache_index: None for a cache grown by each call; for a fixed-capacity cache
            (`init_cache(memory, capacity)`), the position of the first new token.
        return_attention_scores: also return each layer's weights (without a cache only).
        training: whether dropout is active.
        positions: without a cache, None (0, 1, ... in every row), or each token's position
            [batch, T] (rows packed with several pairs: `tfformer.model.layers.segment_positions`).

    Returns:
        hidden states [batch, T, d_model], and the updated cache when `cache` is given; with
        `return_attention_scores`, (that, a list of N {"self", "cross"} weight dicts).
    """

    layer_class = DecoderLayer

    def build(self, embeddings_shape, memory_shape=None):
        self.build_stack(embeddings_shape, memory_shape or embeddings_shape)
        super().build(embeddings_shape)

    def init_cache(self, memory, capacity: int | None = None):
        """The cache before the first decoding step, one dict per layer: grown by each step, or
        of a fixed `capacity` of target positions written in place (see `call`)."""
        return [layer.init_cache(memory, capacity) for layer in self.stack]

    @staticmethod
    def cached_length(cache):
        """How many target positions the cache holds."""
        return ops.shape(cache[0]["self_keys"])[kernels.SEQUENCE_AXIS]

    @staticmethod
    def reorder_cache(cache, rows):
        """The cache of the rows `rows` (e.g. the beams kept by a search step). Rows are only
        ever taken from the same sentence's beams, whose cross-attention part is identical, so
        only the self-attention keys and values move."""
        return [{**layer, "self_keys": kernels.gather_rows(layer["self_keys"], rows),
                 "self_values": kernels.gather_rows(layer["self_values"], rows)}
                for layer in cache]

    def call(self, embeddings, memory=None, self_attention_mask=None, cross_attention_mask=None,
             cache=None, cache_index=None, return_attention_scores=False, training=None,
             positions=None):
        start = 0 if cache is None else (
            self.cached_length(cache) if cache_index is None else cache_index)
        x = self.embed(embeddings, start, training, positions)
        new_cache, weights = [], []
        for i, layer in enumerate(self.stack):
            if return_attention_scores:
                x, layer_weights = layer(x, memory, self_attention_mask, cross_attention_mask,
                                         return_attention_scores=True, training=training)
                weights.append(layer_weights)
            elif cache is None:
                x = layer(x, memory, self_attention_mask, cross_attention_mask, training=training)
            else:
                x, layer_cache = layer(x, memory, self_attention_mask, cross_attention_mask,
                                       cache=cache[i], cache_index=cache_index,
                                       training=training)
                new_cache.append(layer_cache)
        x = self.finish(x)
        if return_attention_scores:
            return x, weights
        return x if cache is None else (x, new_cache)

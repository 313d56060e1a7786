"""Scaled dot-product attention (eq. 1) and multi-head attention (§3.2.2) with a key/value cache.

Masks follow `keras.layers.MultiHeadAttention`: a boolean `attention_mask` of shape
[batch, T_q, T_k] (or broadcastable to it) where True means "may attend".
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfformer.layers.affine import affine


def padding_mask(ids: tf.Tensor, pad_id: int) -> tf.Tensor:
    """[batch, 1, T] boolean mask that hides pad keys from every query."""
    return tf.not_equal(ids, pad_id)[:, tf.newaxis, :]


def causal_mask(query_length: tf.Tensor, key_length: tf.Tensor | None = None) -> tf.Tensor:
    """[1, T_q, T_k] mask: each position attends to itself and earlier positions only (§3.2.3).

    With a cache, the T_q new queries are the last T_q of the T_k key positions.
    """
    key_length = query_length if key_length is None else key_length
    rows = tf.range(query_length)[:, tf.newaxis] + (key_length - query_length)
    cols = tf.range(key_length)[tf.newaxis, :]
    return (rows >= cols)[tf.newaxis]


def _dim(x: tf.Tensor, axis: int):
    """The static size of an axis when known (no op in the graph), else the dynamic one."""
    return x.shape[axis] if x.shape[axis] is not None else tf.shape(x)[axis]


def _one_query_row(x: tf.Tensor) -> bool:
    """Whether x [..., T_q, n] statically has one query row: a cached decoding step."""
    return x.shape.rank is not None and x.shape[-2] == 1


def _batch_matmul(a: tf.Tensor, b: tf.Tensor, transpose_b: bool = False) -> tf.Tensor:
    """tf.matmul for [..., m, k] x [..., k, n]; as BatchMatMulV3 when m is 1 (a decoding step).

    TF's oneDNN graph rewrite turns BatchMatMulV2 (what tf.matmul emits) into a kernel with a
    fixed cost of ~25-50 us per call, which dominates a one-token decoding step; it leaves
    BatchMatMulV3 to Eigen, ~6x faster there (but slower on the square blocks of training).
    Both are core TF ops, which stock TF Serving has. The CPU has no float16 V3 kernel.
    """
    if _one_query_row(a) and a.dtype != tf.float16:
        return tf.raw_ops.BatchMatMulV3(x=a, y=b, Tout=a.dtype, adj_x=False, adj_y=transpose_b)
    return tf.matmul(a, b, transpose_b=transpose_b)


def _softmax(scores: tf.Tensor) -> tf.Tensor:
    """Softmax over the last axis; written out when there is one query row (a decoding step).

    oneDNN's Softmax kernel costs ~35-50 us per call on such a row, the five element-wise ops
    ~10 us. Elsewhere the fused op is faster and has a fused gradient.
    """
    if not _one_query_row(scores):
        return tf.nn.softmax(scores, axis=-1)
    exponentials = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
    return exponentials / tf.reduce_sum(exponentials, axis=-1, keepdims=True)


def _masked_fill_value(dtype: tf.DType) -> float:
    # Large but finite: exp() of it underflows to exactly 0 weight, fp16 does not overflow, and a
    # fully masked row gives a uniform distribution rather than NaN.
    return -3e4 if dtype in (tf.float16, tf.bfloat16) else -1e9


@keras.saving.register_keras_serializable(package="tfformer")
class ScaledDotProductAttention(keras.layers.Layer):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (paper eq. 1).

    Args:
        dropout: dropout rate on the attention weights (only with `training=True`).

    Call arguments:
        query: [..., T_q, d_k].
        key: [..., T_k, d_k].
        value: [..., T_k, d_v].
        attention_mask: optional boolean tensor broadcastable to [..., T_q, T_k]; False gets
            zero weight.
        training: whether dropout is active.

    Returns:
        (output [..., T_q, d_v], weights [..., T_q, T_k]).
    """

    def __init__(self, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self._dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def call(self, query, key, value, attention_mask=None, training=None):
        d_k = key.shape[-1] if key.shape[-1] is not None else tf.shape(key)[-1]
        # Scaling the queries (T_q rows) is cheaper than scaling the scores (T_q x T_k).
        scores = _batch_matmul(
            query * tf.cast(tf.math.rsqrt(tf.cast(d_k, tf.float32)), query.dtype), key,
            transpose_b=True)
        if attention_mask is not None:
            fill = tf.cast(_masked_fill_value(scores.dtype), scores.dtype)
            scores = tf.where(attention_mask, scores, fill)
        # Softmax in float32 even under mixed precision: the exponentials overflow fp16.
        weights = tf.cast(_softmax(tf.cast(scores, tf.float32)), query.dtype)
        output = _batch_matmul(self._dropout_layer(weights, training=training), value)
        return output, weights

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout}


@keras.saving.register_keras_serializable(package="tfformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (§3.2.2).

    Weights have the shapes of `keras.layers.MultiHeadAttention` (query/key/value kernels
    [d_model, h, d_k] with biases [h, d_k], output kernel [h, d_k, d_model] with bias [d_model]),
    so weights copy one to one between the two.

    The key/value cache makes incremental decoding cost O(T) per step instead of O(T^2):
    - self-attention: pass `cache=(keys, values)` of the previous steps ([batch, h, T_past, d_k]);
      the new keys/values are appended with `tf.concat` (not `slice_update`, which lowers to
      XlaDynamicUpdateSlice, an op stock TF Serving lacks) and the grown cache is returned.
    - cross-attention: compute `cache = layer.project_key_value(encoder_output)` once and pass
      `cache=cache, key_value=None`; the static cache is returned unchanged.

    Args:
        num_heads: h.
        key_dim: d_k = d_v, the per-head width.
        dropout: dropout on the attention weights.
        use_bias: whether the projections have biases.

    Call arguments:
        query: [batch, T_q, d_model].
        key_value: [batch, T_k, d_model] to attend over, or None when `cache` holds the
            projected keys/values of a static memory.
        attention_mask: optional boolean [batch, T_q, T_k] (broadcastable); True = attend.
        cache: optional (keys, values) tuple, each [batch, h, T_cache, d_k].
        return_attention_scores: also return the attention weights [batch, h, T_q, T_k] (as
            `keras.layers.MultiHeadAttention` does), last in the returned tuple. A Python flag:
            the default traces the same graph as before, so training and export are unchanged.
        training: whether dropout is active.

    Returns:
        output [batch, T_q, d_model] when `cache` is None, else (output, (keys, values));
        with `return_attention_scores`, the weights are appended: (output, weights) or
        (output, (keys, values), weights).
    """

    def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0,
                 use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.attention = ScaledDotProductAttention(dropout, name="attention")

    def build(self, query_shape, key_value_shape=None):
        d_model = int(query_shape[-1])
        memory_dim = d_model if key_value_shape is None else int(key_value_shape[-1])
        h, d_k = self.num_heads, self.key_dim

        def projection(name, in_dim):
            kernel = self.add_weight(name=f"{name}_kernel", shape=(in_dim, h, d_k),
                                     initializer="glorot_uniform")
            bias = self.add_weight(name=f"{name}_bias", shape=(h, d_k), initializer="zeros") \
                if self.use_bias else None
            return kernel, bias

        self.query_kernel, self.query_bias = projection("query", d_model)
        self.key_kernel, self.key_bias = projection("key", memory_dim)
        self.value_kernel, self.value_bias = projection("value", memory_dim)
        self.output_kernel = self.add_weight(name="output_kernel", shape=(h, d_k, d_model),
                                             initializer="glorot_uniform")
        self.output_bias = self.add_weight(name="output_bias", shape=(d_model,),
                                           initializer="zeros") if self.use_bias else None
        self.attention.build(None)
        super().build(query_shape)

    def _split_heads(self, x, kernel, bias):
        """[batch, T, d] -> [batch, h, T, d_k] with one matmul for all heads."""
        flat = affine(tf.reshape(x, [-1, x.shape[-1]]), tf.reshape(kernel, [x.shape[-1], -1]),
                      None if bias is None else tf.reshape(bias, [-1]))
        heads = tf.reshape(flat, [-1, _dim(x, 1), self.num_heads, self.key_dim])
        return tf.transpose(heads, [0, 2, 1, 3])

    def project_key_value(self, key_value):
        """Projects a static memory once: returns (keys, values), each [batch, h, T_k, d_k]."""
        return (self._split_heads(key_value, self.key_kernel, self.key_bias),
                self._split_heads(key_value, self.value_kernel, self.value_bias))

    def call(self, query, key_value=None, attention_mask=None, cache=None,
             return_attention_scores=False, training=None):
        if key_value is None and cache is None:
            raise ValueError("MultiHeadAttention needs key_value, cache, or both")
        q = self._split_heads(query, self.query_kernel, self.query_bias)
        if key_value is not None:
            keys, values = self.project_key_value(key_value)
            if cache is not None:
                keys = tf.concat([tf.cast(cache[0], keys.dtype), keys], axis=2)
                values = tf.concat([tf.cast(cache[1], values.dtype), values], axis=2)
        else:
            keys, values = cache
        if attention_mask is not None:
            attention_mask = tf.cast(attention_mask, tf.bool)[:, tf.newaxis]  # broadcast over h
        context, weights = self.attention(q, keys, values, attention_mask, training=training)
        # Concat(heads) W^O as one matmul: [batch, T_q, h * d_k] @ [h * d_k, d_model].
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]),
                             [-1, self.num_heads * self.key_dim])
        output_kernel = tf.reshape(self.output_kernel, [self.num_heads * self.key_dim, -1])
        output = affine(context, output_kernel, self.output_bias)
        output = tf.reshape(output, [-1, _dim(query, 1), query.shape[-1]])
        outputs = (output,) if cache is None else (output, (keys, values))
        if return_attention_scores:
            outputs += (weights,)
        return outputs if len(outputs) > 1 else output

    def compute_output_shape(self, query_shape, key_value_shape=None):
        return query_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "dropout": self.dropout, "use_bias": self.use_bias}

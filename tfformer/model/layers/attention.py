"""Scaled dot-product attention (eq. 1) and multi-head attention (§3.2.2) with a key/value cache.

Masks follow `keras.layers.MultiHeadAttention`: a boolean `attention_mask` of shape
[batch, T_q, T_k] (or broadcastable to it) where True means "may attend". Written in
`keras.ops`: the layers run on every Keras backend. Where TensorFlow needs its own ops for
speed (BatchMatMulV3 and a written-out softmax in a one-token decoding step), they are used when
`kernels.ON_TENSORFLOW`; elsewhere (JAX, PyTorch) attention goes through
`keras.ops.dot_product_attention`, which dispatches to cuDNN flash attention on a GPU
(`fused_attention`).
"""

from __future__ import annotations

import functools

import keras
from keras import ops

from tfformer.model.layers import kernels
from tfformer.model.layers.kernels import ON_TENSORFLOW

if ON_TENSORFLOW:
    import tensorflow as tf


def _one_query_row(x) -> bool:
    """Whether x [..., T_q, n] statically has one query row: a cached decoding step."""
    return len(x.shape) >= 2 and x.shape[-2] == 1


# bfloat16, one query row: from this many elements of `b` (the keys or values of a step) on,
# oneDNN's BatchMatMulV2 beats Eigen's V3: V2 has a fixed cost per call, while Eigen's bf16 V3
# costs more per element, so V3 wins on small steps and V2 on large ones (a batch, a beam).
# 2^18 lies between the sizes at which each wins on an AVX512_BF16 CPU.
BF16_ONEDNN_FROM = 1 << 18


def batch_matmul(a, b, transpose_b: bool = False):
    """[..., m, k] x [..., k, n] (or [..., n, k] with transpose_b).

    TensorFlow: as BatchMatMulV3 when m is 1 (a decoding step). TF's oneDNN graph rewrite turns
    BatchMatMulV2 (what tf.matmul emits) into a kernel with a fixed cost per call, which
    dominates a one-token step; it leaves BatchMatMulV3 to Eigen, faster there (but slower on
    the square blocks of training). Both are core TF ops, which stock TF Serving
    has. The CPU has no float16 V3 kernel. In bfloat16 Eigen's V3 is slow per element, so a
    step over large keys/values (a batch of sentences, a beam) takes oneDNN's V2 instead:
    chosen as the graph runs (`BF16_ONEDNN_FROM`), since the batch size is known only then.
    """
    if ON_TENSORFLOW:
        def onednn():
            return tf.matmul(a, b, transpose_b=transpose_b)

        def eigen():
            return tf.raw_ops.BatchMatMulV3(x=a, y=b, Tout=a.dtype, adj_x=False,
                                            adj_y=transpose_b)

        if not _one_query_row(a) or a.dtype == tf.float16:
            return onednn()
        if a.dtype == tf.bfloat16:
            return tf.cond(tf.size(b) >= BF16_ONEDNN_FROM, onednn, eigen)
        return eigen()
    return ops.matmul(a, ops.swapaxes(b, -1, -2) if transpose_b else b)


def softmax(scores):
    """Softmax over the last axis.

    TensorFlow: written out when there is one query row (a decoding step): oneDNN's Softmax
    kernel has a fixed cost per call that exceeds the five element-wise ops on such a row.
    Elsewhere the fused op is faster and has a fused gradient.
    """
    if scores.shape[-1] == 1:
        # One key (an empty source: EOS alone) takes all the weight. Keras' softmax would warn
        # that a softmax over one element is always 1, which here is the point.
        return ops.ones_like(scores)
    if ON_TENSORFLOW and _one_query_row(scores):
        exponentials = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
        return exponentials / tf.reduce_sum(exponentials, axis=-1, keepdims=True)
    return ops.softmax(scores, axis=-1)


def fused_attention(query, key, value, attention_mask=None):
    """softmax(Q K^T / sqrt(d_k)) V in one call, on backends whose `dot_product_attention`
    can fuse it (cuDNN flash attention on a GPU under JAX and PyTorch); None on TensorFlow, whose
    explicit form above is its fast one. Inputs in the heads layout [batch, T, h, d_k];
    `attention_mask` boolean, broadcastable to [batch, h, T_q, T_k]."""
    if ON_TENSORFLOW or _float16_on_jax_cpu(query.dtype):
        return None
    if attention_mask is not None and _on_jax_gpu():
        # cuDNN takes a mask only as a full [batch, 1, T_q, T_k] bias: given a broadcastable one
        # (a padding mask [batch, 1, 1, T_k]), Keras logs the failure and falls back to XLA's
        # attention. Spelled out, every attention layer runs cuDNN's flash kernel.
        attention_mask = ops.broadcast_to(attention_mask, (
            ops.shape(query)[0], 1, ops.shape(query)[1], ops.shape(key)[1]))
    return ops.dot_product_attention(query, key, value, mask=attention_mask,
                                     scale=1.0 / query.shape[-1] ** 0.5)


@functools.cache
def _on_jax_gpu() -> bool:
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "gpu"


def _float16_on_jax_cpu(dtype) -> bool:
    # jax.nn.dot_product_attention multiplies float16 into float32, which XLA's CPU dot lacks
    # ("The precision 'F16_F16_F32' is not supported by dot_general on CPU").
    if keras.backend.standardize_dtype(dtype) != "float16" or keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"


def swap_positions_and_heads(x, heads: int, depth: int):
    """[batch, T, h, d_k] <-> [batch, h, T, d_k], for the layer's h = `heads` and d_k = `depth`.
    Where T is 1 (a decoding step's one position) both hold the same memory: a reshape, not the
    copy a transpose makes (on TensorFlow a oneDNN reorder per call)."""
    if heads > 1 and 1 in x.shape[1:3]:  # with h > 1, the axis of size 1 is T
        return ops.reshape(x, (-1, heads, 1, depth) if x.shape[1] == 1 else (-1, 1, heads, depth))
    return ops.transpose(x, (0, 2, 1, 3))


def padding_mask(ids, pad_id: int):
    """[batch, 1, T] boolean mask that hides pad keys from every query."""
    return ops.expand_dims(ops.not_equal(ids, pad_id), 1)


def segment_mask(query_segments, key_segments):
    """[batch, T_q, T_k] mask of rows packed with several pairs: a query attends to the keys of
    its own segment (ids 1, 2, ...; PAD positions are segment 0).

    A PAD query may attend to every key: it never has no key at all (a softmax over no key
    is a NaN on some kernels), and no loss or real token reads its output.
    """
    query_segments = ops.expand_dims(query_segments, 2)
    return ops.logical_or(ops.equal(query_segments, ops.expand_dims(key_segments, 1)),
                          ops.equal(query_segments, 0))


def segment_positions(segments):
    """[batch, T] position of each token within its segment (§3.5 per packed pair): the count
    of earlier tokens of the same segment."""
    length = ops.shape(segments)[1]
    same = ops.equal(ops.expand_dims(segments, 2), ops.expand_dims(segments, 1))
    earlier = ops.expand_dims(ops.greater(ops.expand_dims(ops.arange(length), 1),
                                          ops.expand_dims(ops.arange(length), 0)), 0)
    return ops.sum(ops.cast(ops.logical_and(same, earlier), "int32"), axis=-1)


def causal_mask(query_length, key_length=None, query_start=None):
    """[1, T_q, T_k] mask: each position attends to itself and earlier positions only (§3.2.3).

    With a cache, the T_q new queries are at positions query_start... of the T_k keys; by
    default the last T_q of them (a cache grown to hold them).
    """
    key_length = query_length if key_length is None else key_length
    query_start = key_length - query_length if query_start is None else query_start
    rows = ops.expand_dims(ops.arange(query_length) + query_start, 1)
    cols = ops.expand_dims(ops.arange(key_length), 0)
    return ops.expand_dims(ops.greater_equal(rows, cols), 0)


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
        # Scaling the queries (T_q rows) is cheaper than scaling the scores (T_q x T_k).
        scale = ops.cast(1.0 / float(query.shape[-1]) ** 0.5, query.dtype)  # d_k
        scores = batch_matmul(query * scale, key, transpose_b=True)
        if attention_mask is not None:
            fill = ops.cast(kernels.masked_fill_value(scores.dtype), scores.dtype)
            scores = ops.where(attention_mask, scores, fill)
        # Softmax in float32 even under mixed precision: the exponentials overflow fp16.
        weights = ops.cast(softmax(ops.cast(scores, "float32")), query.dtype)
        output = batch_matmul(self._dropout_layer(weights, training=training), value)
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

    Heads are kept in the backend's layout (`tfformer.model.layers.kernels`): [batch, h, T, d_k] on
    TensorFlow, [batch, T, h, d_k] elsewhere. There the fused `keras.ops.dot_product_attention`
    computes eq. 1 (cuDNN flash attention on a GPU) unless the weights are asked for or
    attention dropout is active, which take the explicit `ScaledDotProductAttention`.

    The key/value cache makes incremental decoding cost O(T) per step instead of O(T^2):
    - self-attention: pass `cache=(keys, values)` of the previous steps (in the heads layout,
      T_past positions); the new keys/values are appended with a concat (not `slice_update`,
      which lowers to XlaDynamicUpdateSlice, an op stock TF Serving lacks) and the grown cache
      is returned. With `cache_index`, the cache has a fixed capacity instead and the new
      keys/values are written in place at that position (`slice_update`): every step then has
      the same shapes, which JAX compiles once; the mask must hide the unwritten positions.
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
        cache: optional (keys, values) tuple, each in the heads layout with T_cache positions.
        cache_index: None (a cache grown by concat), or the position at which to write the new
            keys/values into a fixed-capacity cache.
        return_attention_scores: also return the attention weights [batch, h, T_q, T_k] (as
            `keras.layers.MultiHeadAttention` does), last in the returned tuple. A Python flag,
            so that a graph traced without it (training, export) neither computes nor returns
            the weights, and may take the fused attention.
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
        """[batch, T, d] -> the heads layout, with one matmul for all heads."""
        in_dim = x.shape[-1]
        flat = kernels.affine(ops.reshape(x, (-1, in_dim)), ops.reshape(kernel, (in_dim, -1)),
                              None if bias is None else ops.reshape(bias, (-1,)))
        heads = ops.reshape(flat, (-1, ops.shape(x)[1], self.num_heads, self.key_dim))
        return self._swap(heads) if kernels.ON_TENSORFLOW else heads

    def _swap(self, x):
        """[batch, T, h, d_k] <-> [batch, h, T, d_k]."""
        return swap_positions_and_heads(x, self.num_heads, self.key_dim)

    def _heads_first(self, x):
        """The heads layout -> [batch, h, T, d_k], what `ScaledDotProductAttention` takes."""
        return x if kernels.ON_TENSORFLOW else self._swap(x)

    def project_key_value(self, key_value):
        """Projects a static memory once: returns (keys, values) in the heads layout."""
        return (self._split_heads(key_value, self.key_kernel, self.key_bias),
                self._split_heads(key_value, self.value_kernel, self.value_bias))

    def call(self, query, key_value=None, attention_mask=None, cache=None, cache_index=None,
             return_attention_scores=False, training=None):
        if key_value is None and cache is None:
            raise ValueError("MultiHeadAttention needs key_value, cache, or both")
        q = self._split_heads(query, self.query_kernel, self.query_bias)
        if key_value is not None:
            keys, values = self.project_key_value(key_value)
            if cache is not None and cache_index is None:
                axis = kernels.SEQUENCE_AXIS
                keys = ops.concatenate([ops.cast(cache[0], keys.dtype), keys], axis=axis)
                values = ops.concatenate([ops.cast(cache[1], values.dtype), values], axis=axis)
            elif cache is not None:
                start = [0, 0, 0, 0]
                start[kernels.SEQUENCE_AXIS] = cache_index
                keys = ops.slice_update(ops.cast(cache[0], keys.dtype), start, keys)
                values = ops.slice_update(ops.cast(cache[1], values.dtype), start, values)
        else:
            keys, values = cache
        if attention_mask is not None:
            attention_mask = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)  # over h
        explicit = return_attention_scores or (training and self.dropout > 0)
        context = None if explicit else fused_attention(q, keys, values, attention_mask)
        if context is None:
            context, weights = self.attention(
                self._heads_first(q), self._heads_first(keys), self._heads_first(values),
                attention_mask, training=training)
            context = self._swap(context)  # [batch, T_q, h, d_k]
        # Concat(heads) W^O as one matmul: [batch * T_q, h * d_k] @ [h * d_k, d_model].
        context = ops.reshape(context, (-1, self.num_heads * self.key_dim))
        output_kernel = ops.reshape(self.output_kernel, (self.num_heads * self.key_dim, -1))
        output = kernels.affine(context, output_kernel, self.output_bias)
        output = kernels.rows_as(output, query)
        outputs = (output,) if cache is None else (output, (keys, values))
        if return_attention_scores:
            outputs += (weights,)
        return outputs if len(outputs) > 1 else output

    def compute_output_shape(self, query_shape, key_value_shape=None):
        return query_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "dropout": self.dropout, "use_bias": self.use_bias}

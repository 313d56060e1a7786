"""The few computations whose fastest form differs by Keras backend, behind one named check.

Every layer is written in `keras.ops` and runs on any backend. Where TensorFlow needs its own op
for speed (oneDNN's fused MatMul + BiasAdd, BatchMatMulV3 in a one-token decoding step) the
TensorFlow form is used when `ON_TENSORFLOW`; elsewhere (JAX, PyTorch) attention goes through
`keras.ops.dot_product_attention`, which dispatches to cuDNN flash attention on a GPU.

The layout of attention heads follows the same check (`SEQUENCE_AXIS`):
- TensorFlow: [batch, h, T, d_k]. Batched matmuls run over [batch, h], and the decoder's cache
  is kept in that layout, so a decoding step transposes only its new position.
- other backends: [batch, T, h, d_k], the layout `keras.ops.dot_product_attention` takes; the
  heads are a reshape of the projection, with no transpose at all.
"""

from __future__ import annotations

import functools

import keras
from keras import ops

from tfformer.utils.backends import on_tensorflow

# Which backend's fast forms to use, fixed for the process (Keras' backend is).
ON_TENSORFLOW = on_tensorflow()

if ON_TENSORFLOW:
    import tensorflow as tf

# Axis of the key/value positions in the heads layout (and so in the decoder's cache).
SEQUENCE_AXIS = 2 if ON_TENSORFLOW else 1


def masked_fill_value(dtype) -> float:
    """Score given to masked keys: large but finite, so that exp() of it underflows to exactly 0
    weight, fp16 and bf16 do not overflow, and a fully masked row is uniform rather than NaN."""
    return -3e4 if keras.backend.standardize_dtype(dtype) in ("float16", "bfloat16") else -1e9


def affine(rows, kernel, bias=None):
    """rows [n, in] @ kernel [in, out] (+ bias [out]), in the rows' dtype (mixed precision).

    Kept 2-D on purpose: TensorFlow's oneDNN fuses MatMul + BiasAdd (+ Relu) into one kernel,
    which it cannot do for the Tensordot that a 3-D input produces; the fused kernel saves most
    in a one-token decoding step, where the per-op overhead dominates.
    """
    if ON_TENSORFLOW:
        output = tf.matmul(rows, tf.cast(kernel, rows.dtype))
        return output if bias is None else tf.nn.bias_add(output, tf.cast(bias, rows.dtype))
    output = ops.matmul(rows, ops.cast(kernel, rows.dtype))
    return output if bias is None else output + ops.cast(bias, rows.dtype)


def rows_as(rows, like):
    """rows [n, k] (the 2-D form `affine` takes and gives) back in the leading shape of `like`
    [batch, ..., d]: [batch, ..., k]. The batch is -1, so a shape static past it (a decoding
    step's [batch, 1, k]) is a constant, not the Shape, StridedSlice and Pack ops that
    computing it would add to every step."""
    middle = like.shape[1:-1]
    dynamic = None if None not in middle else ops.shape(like)
    return ops.reshape(rows, (-1, *(size if size is not None else dynamic[axis]
                                    for axis, size in enumerate(middle, 1)), rows.shape[-1]))


def gather_rows(table, ids, dtype=None):
    """table[ids] (an embedding lookup, or the cache rows a beam search keeps), in `dtype`."""
    if dtype is not None:
        table = ops.cast(table, dtype)
    if ON_TENSORFLOW:  # keras.ops.take adds a negative-index fix-up per call
        return tf.gather(table, ids)
    return ops.take(table, ids, axis=0)


def swap_positions_and_heads(x, heads: int, depth: int):
    """[batch, T, h, d_k] <-> [batch, h, T, d_k], for the layer's h = `heads` and d_k = `depth`.
    Where T is 1 (a decoding step's one position) both hold the same memory: a reshape, not the
    copy a transpose makes (on TensorFlow a oneDNN reorder per call)."""
    if heads > 1 and 1 in x.shape[1:3]:  # with h > 1, the axis of size 1 is T
        return ops.reshape(x, (-1, heads, 1, depth) if x.shape[1] == 1 else (-1, 1, heads, depth))
    return ops.transpose(x, (0, 2, 1, 3))


def take_rows(values, indices):
    """values[b, indices[b, j]]: [batch, n, ...] at int [batch, m] -> [batch, m, ...] (the
    hypotheses or scores a beam search step keeps)."""
    if ON_TENSORFLOW:  # keras.ops.take_along_axis adds a broadcast, a fix-up and 3 transposes
        return tf.gather(values, indices, axis=1, batch_dims=1)
    for _ in range(len(values.shape) - 2):  # broadcast over the trailing axes
        indices = ops.expand_dims(indices, -1)
    return ops.take_along_axis(values, indices, axis=1)


def take_last_axis(values, indices):
    """values[..., indices] per position: [batch, T, V] at int [batch, T] -> [batch, T]."""
    if ON_TENSORFLOW:
        return tf.gather(values, indices, batch_dims=len(indices.shape))
    return ops.squeeze(ops.take_along_axis(values, ops.expand_dims(indices, -1), axis=-1), -1)


def argmax_last(values):
    """int32 index of the largest value on the last axis (the predicted token)."""
    if ON_TENSORFLOW:  # keras.ops.argmax adds 4 passes over [batch, T, V] (a -0.0 fix-up)
        return tf.argmax(values, axis=-1, output_type=tf.int32)
    return ops.cast(ops.argmax(values, axis=-1), "int32")


def sum_over_replicas(value):
    """(value summed over the tf.distribute replicas in sync, their number): what a per-replica
    step needs for a global mean. Other backends compute on the global batch: (value, 1)."""
    if ON_TENSORFLOW:
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            return (context.all_reduce(tf.distribute.ReduceOp.SUM, value),
                    context.num_replicas_in_sync)
    return value, 1


def check_at_most(value, limit: int, message: str) -> None:
    """Asserts value <= limit when the graph runs (TensorFlow, where lengths can be dynamic);
    other backends have static shapes, which the caller checks in Python."""
    if ON_TENSORFLOW:
        tf.debugging.assert_less_equal(value, limit, message=message)


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


def matmul_transposed(rows, table):
    """rows [n, d] @ table [m, d]^T: the pre-softmax projection with the embedding matrix."""
    if ON_TENSORFLOW:  # MatMul(transpose_b) reads the table as it is: no Transpose op per call
        return tf.matmul(rows, tf.cast(table, rows.dtype), transpose_b=True)
    return ops.matmul(rows, ops.transpose(ops.cast(table, rows.dtype)))


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


def fused_adam_applies(variable, amsgrad: bool) -> bool:
    """Whether `apply_adam` can update `variable`: on TensorFlow, for Adam without amsgrad, and
    for float32 or float64 variables (mixed precision keeps its variables in float32)."""
    return ON_TENSORFLOW and not amsgrad and \
        keras.backend.standardize_dtype(variable.dtype) in ("float32", "float64")


def apply_adam(variable, m, v, gradient, learning_rate, beta_1_power, beta_2_power, beta_1,
               beta_2, epsilon) -> None:
    """Keras' Adam update of one variable in one TensorFlow op, ResourceApplyAdam:
    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1);
    v += (g^2 - v)(1 - beta_2); variable -= alpha * m / (sqrt(v) + epsilon): the arithmetic of
    `keras.optimizers.Adam.update_step`, in the same order. Where `fused_adam_applies`."""
    def handle(x):
        # A keras.Variable holds a tf.Variable; inside tf.distribute's update() the handle of a
        # mirrored one is the replica's own.
        return (x.value if isinstance(x, keras.Variable) else x).handle

    dtype = variable.dtype
    if isinstance(gradient, tf.IndexedSlices):  # an embedding's rows: Keras' update densifies
        gradient = tf.convert_to_tensor(gradient)
    tf.raw_ops.ResourceApplyAdam(
        var=handle(variable), m=handle(m), v=handle(v),
        beta1_power=tf.cast(beta_1_power, dtype), beta2_power=tf.cast(beta_2_power, dtype),
        lr=tf.cast(learning_rate, dtype), beta1=tf.constant(beta_1, dtype),
        beta2=tf.constant(beta_2, dtype), epsilon=tf.constant(epsilon, dtype),
        grad=tf.cast(gradient, dtype))

"""The tensor operations whose fastest form differs by Keras backend that several layers share
(a projection, a lookup, a gather), behind one named check.

Every layer is written in `keras.ops` and runs on any backend. Where TensorFlow needs its own op
for speed (oneDNN's fused MatMul + BiasAdd, a gather without Keras' index fix-ups) the
TensorFlow form is used when `ON_TENSORFLOW`. Attention's own forms are in
`tfformer.model.layers.attention`, Adam's fused update in `tfformer.model.adam`, the sum over
replicas in `tfformer.model.losses`.

The layout of attention heads follows the same check (`SEQUENCE_AXIS`):
- TensorFlow: [batch, h, T, d_k]. Batched matmuls run over [batch, h], and the decoder's cache
  is kept in that layout, so a decoding step transposes only its new position.
- other backends: [batch, T, h, d_k], the layout `keras.ops.dot_product_attention` takes; the
  heads are a reshape of the projection, with no transpose at all.
"""

from __future__ import annotations

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


def check_at_most(value, limit: int, message: str) -> None:
    """Asserts value <= limit when the graph runs (TensorFlow, where lengths can be dynamic);
    other backends have static shapes, which the caller checks in Python."""
    if ON_TENSORFLOW:
        tf.debugging.assert_less_equal(value, limit, message=message)


def matmul_transposed(rows, table):
    """rows [n, d] @ table [m, d]^T: the pre-softmax projection with the embedding matrix."""
    if ON_TENSORFLOW:  # MatMul(transpose_b) reads the table as it is: no Transpose op per call
        return tf.matmul(rows, tf.cast(table, rows.dtype), transpose_b=True)
    return ops.matmul(rows, ops.transpose(ops.cast(table, rows.dtype)))

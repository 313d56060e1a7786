"""x W + b on rows: the one matmul every projection of the model uses."""

from __future__ import annotations

import tensorflow as tf


def affine(rows: tf.Tensor, kernel, bias=None) -> tf.Tensor:
    """rows [n, in] @ kernel [in, out] (+ bias [out]), in the rows' dtype (mixed precision).

    Kept 2-D on purpose: oneDNN fuses MatMul + BiasAdd (+ Relu) into one kernel, which it cannot
    do for the Tensordot that a 3-D input produces; in a one-token decoding step the fused kernel
    is ~2.5x cheaper per call.
    """
    output = tf.matmul(rows, tf.cast(kernel, rows.dtype))
    return output if bias is None else tf.nn.bias_add(output, tf.cast(bias, rows.dtype))

"""Token embeddings tied to the pre-softmax projection (§3.4) and positional encodings (§3.5)."""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from tfformer.model.layers import kernels


def sinusoidal_table(positions, d_model: int, dtype="float32", layout: str = "interleaved"):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) (§3.5).

    Args:
        positions: int tensor [T] of absolute positions.
        d_model: encoding width (even or odd).
        layout: "interleaved" (§3.5: sines in even columns, cosines in odd), or "halves": the
            same d_model // 2 frequencies' sines in the first half and cosines in the second
            (Marian's, as Hugging Face's MarianSinusoidalPositionalEmbedding writes it).

    Returns:
        [T, d_model].
    """
    i = np.arange(d_model)
    if layout == "interleaved":
        # Column c uses frequency index 2 * (c // 2): even columns sin, odd columns cos.
        exponents, sines = 2 * (i // 2), i % 2 == 0
    elif layout == "halves":
        half = (d_model + 1) // 2  # an odd width has one sine more than cosines
        sines = i < half
        exponents = np.where(sines, 2 * i, 2 * (i - half))
    else:
        raise ValueError(f"layout must be 'interleaved' or 'halves', got {layout!r}")
    # The NumPy constants become tensors first: a torch tensor on a GPU does not mix with NumPy.
    inverse_freq = ops.convert_to_tensor(
        (1.0 / np.power(10000.0, exponents / d_model)).astype("float32")[np.newaxis, :])
    angles = ops.expand_dims(ops.cast(positions, "float32"), 1) * inverse_freq
    table = ops.where(ops.convert_to_tensor(sines), ops.sin(angles), ops.cos(angles))
    return ops.cast(table, dtype)


@keras.saving.register_keras_serializable(package="tfformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of §3.5; no weights, any length.

    Args:
        layout: "interleaved" (§3.5) or "halves" (see `sinusoidal_table`).

    Call arguments:
        inputs: [batch, T, d_model] embeddings.
        start: position of the first token (non-zero when decoding with a cache).
        positions: or each token's own position, int [batch, T] (rows packed with several
            pairs: `tfformer.model.layers.segment_positions`).

    Returns:
        inputs + PE[start : start + T], or inputs + PE[positions].
    """

    def __init__(self, layout: str = "interleaved", **kwargs):
        super().__init__(**kwargs)
        self.layout = layout

    def call(self, inputs, start=0, positions=None):
        if positions is not None:
            table = sinusoidal_table(ops.reshape(positions, (-1,)), inputs.shape[-1],
                                     inputs.dtype, self.layout)
            return inputs + ops.reshape(table, ops.shape(inputs))
        positions = ops.arange(ops.shape(inputs)[1], dtype="int32") + ops.cast(start, "int32")
        table = sinusoidal_table(positions, inputs.shape[-1], inputs.dtype, self.layout)
        return inputs + ops.expand_dims(table, 0)

    def get_config(self):
        return {**super().get_config(), "layout": self.layout}


@keras.saving.register_keras_serializable(package="tfformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned [max_length, d_model] position embedding (Table 3, row E).

    Args:
        max_length: number of positions; longer inputs are an error.

    Call arguments:
        inputs: [batch, T, d_model] embeddings.
        start: position of the first token (non-zero when decoding with a cache).
        positions: or each token's own position, int [batch, T] (< max_length).

    Returns:
        inputs + P[start : start + T], or inputs + P[positions].
    """

    def __init__(self, max_length: int, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_length, int(inputs_shape[-1])),
            initializer=keras.initializers.RandomNormal(stddev=0.02))
        super().build(inputs_shape)

    def call(self, inputs, start=0, positions=None):
        if positions is not None:
            kernels.check_at_most(ops.max(positions) + 1, self.max_length,
                                  "sequence is longer than the learned positions")
            table = kernels.gather_rows(self.position_embeddings, positions, inputs.dtype)
            return inputs + table
        length = ops.shape(inputs)[1]
        if isinstance(start, int) and isinstance(length, int) and start + length > self.max_length:
            raise ValueError(f"sequence of {start + length} positions is longer than the "
                             f"{self.max_length} learned positions")
        start = ops.cast(start, "int32")
        kernels.check_at_most(start + length, self.max_length,
                              "sequence is longer than the learned positions")
        # The variable's value, not the variable: JAX's dynamic_slice takes no keras.Variable.
        table = ops.slice(ops.convert_to_tensor(self.position_embeddings), (start, 0),
                          (length, inputs.shape[-1]))
        return inputs + ops.expand_dims(ops.cast(table, inputs.dtype), 0)

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}


@keras.saving.register_keras_serializable(package="tfformer")
class SharedEmbedding(keras.layers.Layer):
    """Token embedding scaled by sqrt(d_model); its transpose is the pre-softmax projection (§3.4).

    Args:
        vocab_size: number of token ids.
        d_model: embedding width.
        logits_bias: whether `logits` adds a learned bias [vocab] (Marian's final_logits_bias).

    Call arguments:
        ids: int tensor [batch, T].

    Returns:
        [batch, T, d_model] = E[ids] * sqrt(d_model). `logits(x)` returns x E^T (+ b),
        [batch, T, vocab].
    """

    def __init__(self, vocab_size: int, d_model: int, logits_bias: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.logits_bias = logits_bias

    def build(self, ids_shape=None):
        # stddev d_model^-0.5 makes the scaled embeddings unit-variance, like the positions.
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))
        self.bias = self.add_weight(name="logits_bias", shape=(self.vocab_size,),
                                    initializer="zeros") if self.logits_bias else None
        super().build(ids_shape)

    def call(self, ids):
        vectors = kernels.gather_rows(self.embeddings, ids, self.compute_dtype)
        return vectors * ops.cast(math.sqrt(self.d_model), vectors.dtype)

    def logits(self, x, projection=None):
        """Pre-softmax linear transformation sharing the embedding matrix: x E^T (+ the logits
        bias), or x times `projection` when given: E^T already transposed, [d_model, vocab]
        (`projection()`)."""
        flat = ops.reshape(x, (-1, self.d_model))
        if projection is None:
            logits = kernels.matmul_transposed(flat, self.embeddings)
        else:
            logits = ops.matmul(flat, ops.cast(projection, flat.dtype))
        if self.bias is not None:
            logits = logits + ops.cast(self.bias, logits.dtype)
        return kernels.rows_as(logits, x)

    def projection(self):
        """E^T, [d_model, vocab], in the compute dtype: a decoding loop computes it once per
        call and gives it to every step's `logits`. Without oneDNN (TensorFlow's default on
        CPUs without AVX-512), TensorFlow's CPU MatMul multiplies a few rows by a transposed
        table far slower than by one laid out [d_model, vocab] (docs/results.md, "Deployment
        formats", CPUs without AVX-512), and Grappler folds a Transpose beside the MatMul back
        into it: made outside the loop, the transpose stays."""
        return ops.transpose(ops.cast(self.embeddings, self.compute_dtype))

    def compute_output_shape(self, ids_shape):
        return tuple(ids_shape) + (self.d_model,)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model,
                "logits_bias": self.logits_bias}

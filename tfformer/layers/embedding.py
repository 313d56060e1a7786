"""Token embeddings tied to the pre-softmax projection (§3.4) and positional encodings (§3.5)."""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf


def sinusoidal_table(positions: tf.Tensor, d_model: int, dtype=tf.float32) -> tf.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) (§3.5).

    Args:
        positions: int tensor [T] of absolute positions.
        d_model: encoding width (even or odd).

    Returns:
        [T, d_model] with sines in even columns and cosines in odd columns.
    """
    i = np.arange(d_model)
    # Column c uses frequency index 2 * (c // 2): even columns sin, odd columns cos, as in §3.5.
    inverse_freq = tf.constant(1.0 / np.power(10000.0, (2 * (i // 2)) / d_model), tf.float32)
    angles = tf.cast(positions, tf.float32)[:, tf.newaxis] * inverse_freq[tf.newaxis, :]
    table = tf.where(tf.constant(i % 2 == 0), tf.sin(angles), tf.cos(angles))
    return tf.cast(table, dtype)


@keras.saving.register_keras_serializable(package="tfformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of §3.5; no weights, any length.

    Call arguments:
        inputs: [batch, T, d_model] embeddings.
        start: position of the first token (non-zero when decoding with a cache).

    Returns:
        inputs + PE[start : start + T].
    """

    def call(self, inputs, start=0):
        positions = tf.range(tf.shape(inputs)[1]) + tf.cast(start, tf.int32)
        return inputs + sinusoidal_table(positions, inputs.shape[-1], inputs.dtype)[tf.newaxis]


@keras.saving.register_keras_serializable(package="tfformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned [max_length, d_model] position embedding (Table 3, row E).

    Args:
        max_length: number of positions; longer inputs are an error.

    Call arguments:
        inputs: [batch, T, d_model] embeddings.
        start: position of the first token (non-zero when decoding with a cache).

    Returns:
        inputs + P[start : start + T].
    """

    def __init__(self, max_length: int, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_length, int(inputs_shape[-1])),
            initializer=keras.initializers.RandomNormal(stddev=0.02))
        super().build(inputs_shape)

    def call(self, inputs, start=0):
        start = tf.cast(start, tf.int32)
        end = start + tf.shape(inputs)[1]
        tf.debugging.assert_less_equal(
            end, self.max_length, message="sequence is longer than the learned positions")
        table = tf.cast(self.position_embeddings[start:end], inputs.dtype)
        return inputs + table[tf.newaxis]

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}


@keras.saving.register_keras_serializable(package="tfformer")
class SharedEmbedding(keras.layers.Layer):
    """Token embedding scaled by sqrt(d_model); its transpose is the pre-softmax projection (§3.4).

    Args:
        vocab_size: number of token ids.
        d_model: embedding width.

    Call arguments:
        ids: int tensor [batch, T].

    Returns:
        [batch, T, d_model] = E[ids] * sqrt(d_model). `logits(x)` returns x E^T, [batch, T, vocab].
    """

    def __init__(self, vocab_size: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, ids_shape=None):
        # stddev d_model^-0.5 makes the scaled embeddings unit-variance, like the positions.
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))
        super().build(ids_shape)

    def call(self, ids):
        vectors = tf.gather(tf.cast(self.embeddings, self.compute_dtype), ids)
        return vectors * tf.cast(math.sqrt(self.d_model), vectors.dtype)

    def logits(self, x):
        """Pre-softmax linear transformation sharing the embedding matrix."""
        flat = tf.reshape(x, [-1, self.d_model])
        logits = tf.matmul(flat, tf.cast(self.embeddings, x.dtype), transpose_b=True)
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.vocab_size]], axis=0))

    def compute_output_shape(self, ids_shape):
        return tuple(ids_shape) + (self.d_model,)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}

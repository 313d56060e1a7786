"""Positional encodings (§3.5) and the tied, scaled token embedding (§3.4).

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS).
"""

import math

import numpy as np
from keras import ops

from tfformer.model.layers.embedding import (
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)

to_numpy = ops.convert_to_numpy


def test_sinusoidal_table_equals_section_3_5_formula():
    d_model, length = 16, 50
    table = to_numpy(sinusoidal_table(np.arange(length), d_model))
    expected = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            expected[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
            expected[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    np.testing.assert_allclose(table, expected, atol=1e-5)


def test_sinusoidal_layer_adds_positions_from_start_offset():
    x = np.zeros((2, 3, 8), "float32")
    out = to_numpy(SinusoidalPositionalEncoding()(x, start=5))
    np.testing.assert_allclose(out[1], to_numpy(sinusoidal_table(np.arange(5, 8), 8)), atol=1e-6)


def test_learned_positions_add_their_rows():
    layer = LearnedPositionalEmbedding(max_length=10)
    x = np.ones((1, 4, 6), "float32")
    out = to_numpy(layer(x, start=3))
    np.testing.assert_allclose(out[0], 1 + to_numpy(layer.position_embeddings)[3:7], atol=1e-6)


def test_embedding_scaled_by_sqrt_d_model_and_tied_to_logits():
    layer = SharedEmbedding(vocab_size=11, d_model=9)
    ids = np.array([[1, 5, 10]])
    vectors = to_numpy(layer(ids))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(vectors[0], table[[1, 5, 10]] * 3.0, atol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(2, 4, 9)).astype("float32")
    np.testing.assert_allclose(to_numpy(layer.logits(hidden)), hidden @ table.T, atol=1e-5)
    # The table transposed once, as a decoding loop gives it to every step.
    np.testing.assert_allclose(to_numpy(layer.projection()), table.T)
    np.testing.assert_allclose(to_numpy(layer.logits(hidden, layer.projection())),
                               hidden @ table.T, atol=1e-5)


def test_halves_layout_is_marians_sines_then_cosines():
    """Hugging Face's MarianSinusoidalPositionalEmbedding, written out in NumPy: the angles of
    the interleaved table, sines of the even columns first, cosines of the odd ones after."""
    for d_model in (8, 7):
        angles = np.array([[pos / np.power(10000, 2 * (j // 2) / d_model)
                            for j in range(d_model)] for pos in range(50)])
        half = (d_model + 1) // 2
        expected = np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)
        table = ops.convert_to_numpy(sinusoidal_table(np.arange(50), d_model, layout="halves"))
        assert table.shape == (50, d_model) and expected[:, :half].shape[1] == half
        np.testing.assert_allclose(table, expected, atol=2e-5)

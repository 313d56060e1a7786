"""Scaled dot-product and multi-head attention against NumPy and Keras' own layer.

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS).
"""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.model.layers import attention, kernels
from tfformer.model.layers.attention import (
    MultiHeadAttention,
    ScaledDotProductAttention,
    causal_mask,
    padding_mask,
)

to_numpy = ops.convert_to_numpy


def numpy_attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V, written from the paper (eq. 1)."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def test_scaled_dot_product_matches_numpy_with_padding_and_causal_masks():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 3, 5, 8)).astype("float32") for _ in range(3))
    ids = np.array([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    mask = to_numpy(ops.logical_and(padding_mask(ids, 0), causal_mask(5)))[:, np.newaxis]
    assert mask.shape == (2, 1, 5, 5)
    out, weights = ScaledDotProductAttention()(q, k, v, ops.convert_to_tensor(mask))
    out, weights = to_numpy(out), to_numpy(weights)
    ref_out, ref_weights = numpy_attention(q, k, v, mask)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-6)
    # Masked keys get exactly zero weight: pads of sentence 0 and every future position.
    assert np.all(weights[0, :, :, 3:] == 0)
    assert np.all(weights[np.broadcast_to(~mask, weights.shape)] == 0)


def test_scaled_dot_product_without_mask_matches_numpy():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(4, 3, 16)).astype("float32")
    k = rng.normal(size=(4, 7, 16)).astype("float32")
    v = rng.normal(size=(4, 7, 6)).astype("float32")
    out, _ = ScaledDotProductAttention()(q, k, v)
    np.testing.assert_allclose(to_numpy(out), numpy_attention(q, k, v)[0], atol=1e-5)


def test_one_key_takes_all_the_weight_without_a_warning():
    """An empty source is EOS alone: one key. Its weight is 1 for every query (NumPy's softmax),
    and Keras' warning about a softmax over one element is not raised."""
    import warnings

    rng = np.random.default_rng(2)
    q = rng.normal(size=(2, 4, 3, 8)).astype("float32")
    k, v = (rng.normal(size=(2, 4, 1, 8)).astype("float32") for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, weights = ScaledDotProductAttention()(q, k, v)
    ref_out, ref_weights = numpy_attention(q, k, v)
    np.testing.assert_array_equal(to_numpy(weights), ref_weights)
    np.testing.assert_allclose(to_numpy(out), ref_out, atol=1e-6)


@pytest.mark.parametrize("dtype, atol", [("float32", 1e-5), ("bfloat16", 3e-2)])
def test_scaled_dot_product_with_one_query_row_matches_numpy(dtype, atol):
    # One query row (a cached decoding step): on TensorFlow it takes BatchMatMulV3 and a
    # written-out softmax (see the TF-only test below), elsewhere the generic ops.
    rng = np.random.default_rng(3)
    q = rng.normal(size=(3, 4, 1, 8)).astype("float32")
    k, v = (rng.normal(size=(3, 4, 6, 8)).astype("float32") for _ in range(2))
    mask = (np.arange(6)[np.newaxis, :] < np.array([6, 2, 4])[:, np.newaxis])
    mask = mask[:, np.newaxis, np.newaxis, :]  # [3, 1, 1, 6]: source padding
    cast = lambda x: ops.cast(x, dtype)  # noqa: E731
    out, weights = ScaledDotProductAttention(dtype=dtype)(cast(q), cast(k), cast(v),
                                                         ops.convert_to_tensor(mask))
    assert keras.backend.standardize_dtype(out.dtype) == dtype and out.shape == (3, 4, 1, 8)
    ref_out, ref_weights = numpy_attention(q, k, v, mask)
    weights = to_numpy(ops.cast(weights, "float32"))
    np.testing.assert_allclose(to_numpy(ops.cast(out, "float32")), ref_out, atol=atol)
    np.testing.assert_allclose(weights, ref_weights, atol=atol)
    assert np.all(weights[1, :, :, 2:] == 0)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="BatchMatMulV3 and the written-out softmax are TensorFlow's fast forms")
def test_one_query_row_traces_batch_matmul_v3_and_no_softmax_op_on_tensorflow():
    import tensorflow as tf

    layer = ScaledDotProductAttention()

    def op_types(query_length):
        spec = tf.TensorSpec([3, 4, query_length, 8], tf.float32)
        graph = tf.function(layer.call).get_concrete_function(spec, spec, spec).graph
        return {op.type for op in graph.get_operations()}

    step = op_types(1)
    assert "BatchMatMulV3" in step and "Softmax" not in step
    assert not {"BatchMatMulV2", "BatchMatMul"} & step
    full = op_types(5)  # several query rows: the fused ops
    assert "BatchMatMulV3" not in full and "Softmax" in full


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the bf16 choice between BatchMatMulV3 and V2 is TensorFlow's")
@pytest.mark.parametrize("shape", [(2, 4, 8, 16), (16, 8, 40, 64)])  # Eigen's V3; oneDNN's V2
@pytest.mark.parametrize("transpose_b", [True, False])
def test_a_bf16_step_multiplies_as_float32_does_on_either_kernel(shape, transpose_b):
    import tensorflow as tf

    rows, heads, positions, d_k = shape
    rng = np.random.default_rng(4)
    # Values exact in bf16, so that the float32 product is the reference.
    query = tf.cast(rng.normal(size=(rows, heads, 1, d_k)), tf.bfloat16)
    keys = tf.cast(rng.normal(size=(rows, heads, positions, d_k)), tf.bfloat16)
    weights = tf.cast(rng.uniform(size=(rows, heads, 1, positions)), tf.bfloat16)
    a, b = (query, keys) if transpose_b else (weights, keys)
    assert (int(tf.size(b)) >= attention.BF16_ONEDNN_FROM) == (rows == 16)  # both kernels run
    reference = np.matmul(np.float32(a), np.swapaxes(np.float32(b), -1, -2) if transpose_b
                          else np.float32(b))
    for product in (attention.batch_matmul(a, b, transpose_b),
                    tf.function(attention.batch_matmul)(a, b, transpose_b)):
        assert product.dtype == tf.bfloat16 and product.shape == reference.shape
        np.testing.assert_allclose(np.float32(product), reference, rtol=2e-2,
                                   atol=2e-2 * np.abs(reference).max())

    def op_types(dtype):
        spec = tf.TensorSpec([None, heads, 1, d_k], dtype)
        function = tf.function(attention.batch_matmul).get_concrete_function(
            spec, tf.TensorSpec([None, heads, None, d_k], dtype), True)
        definition = function.graph.as_graph_def()
        return {node.op for node in definition.node} | {
            node.op for branch in definition.library.function for node in branch.node_def}

    bf16_ops, float32_ops = op_types(tf.bfloat16), op_types(tf.float32)
    assert {"BatchMatMulV3", "BatchMatMulV2"} <= bf16_ops  # chosen by size as the graph runs
    assert "BatchMatMulV3" in float32_ops and "BatchMatMulV2" not in float32_ops


def test_causal_mask_with_cache_offset():
    mask = to_numpy(causal_mask(2, 5))[0]
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


@pytest.mark.parametrize("use_mask", [False, True])
def test_multi_head_attention_equals_keras_layer_with_copied_weights(use_mask):
    rng = np.random.default_rng(2)
    query = rng.normal(size=(3, 6, 32)).astype("float32")
    memory = rng.normal(size=(3, 9, 32)).astype("float32")
    mask = None
    if use_mask:
        lengths = np.array([9, 4, 7])
        mask = np.broadcast_to(np.arange(9)[np.newaxis, np.newaxis, :] < lengths[:, None, None],
                               (3, 6, 9))
    ours = MultiHeadAttention(num_heads=4, key_dim=8)
    ours_out = ours(query, memory, None if mask is None else ops.convert_to_tensor(mask))
    reference = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)
    reference(query, memory)
    assert [w.shape for w in reference.get_weights()] == [w.shape for w in ours.get_weights()]
    # Random biases (not zeros) so a misplaced bias shows; glorot-like scale keeps outputs O(1).
    weights = [rng.normal(scale=0.2, size=w.shape).astype("float32")
               for w in ours.get_weights()]
    ours.set_weights(weights)
    reference.set_weights(weights)
    ours_out = ours(query, memory, None if mask is None else ops.convert_to_tensor(mask))
    ref_out = reference(query, memory, attention_mask=mask)
    assert np.max(np.abs(to_numpy(ours_out) - to_numpy(ref_out))) <= 1e-5


def test_multi_head_attention_cache_grows_and_matches_full_causal_attention():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    full = to_numpy(layer(x, x, causal_mask(5)))
    axis = kernels.SEQUENCE_AXIS  # the cache is in the backend's heads layout

    def cache_shape(length):
        return (2, 2, length, 8) if axis == 2 else (2, length, 2, 8)

    cache = (ops.zeros(cache_shape(0)), ops.zeros(cache_shape(0)))
    steps = []
    for t in range(5):
        out, cache = layer(x[:, t:t + 1], x[:, t:t + 1], cache=cache)
        steps.append(to_numpy(out))
        assert tuple(cache[0].shape) == cache_shape(t + 1)
        assert tuple(cache[1].shape) == cache_shape(t + 1)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_multi_head_attention_static_cache_equals_memory():
    rng = np.random.default_rng(4)
    query = rng.normal(size=(2, 3, 16)).astype("float32")
    memory = rng.normal(size=(2, 7, 16)).astype("float32")
    layer = MultiHeadAttention(num_heads=4, key_dim=4)
    direct = layer(query, memory)
    cache = layer.project_key_value(memory)
    cached, returned = layer(query, None, cache=cache)
    np.testing.assert_allclose(to_numpy(cached), to_numpy(direct), atol=1e-6)
    assert returned[0] is cache[0]


def test_layers_serialize_through_get_config():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.2, name="mha")
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert (clone.num_heads, clone.key_dim, clone.dropout) == (2, 4, 0.2)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, MultiHeadAttention) and restored.key_dim == 4


@pytest.mark.parametrize("with_cache", [False, True])
def test_returned_attention_scores_equal_keras_layers_with_copied_weights(with_cache):
    rng = np.random.default_rng(4)
    query = rng.normal(size=(2, 5, 32)).astype("float32")
    memory = rng.normal(size=(2, 7, 32)).astype("float32")
    mask = np.broadcast_to(np.arange(7)[None, None, :] < np.array([7, 3])[:, None, None],
                           (2, 5, 7))
    ours = MultiHeadAttention(num_heads=4, key_dim=8)
    ours(query, memory)
    reference = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)
    reference(query, memory)
    weights = [rng.normal(scale=0.2, size=w.shape).astype("float32")
               for w in ours.get_weights()]
    ours.set_weights(weights)
    reference.set_weights(weights)
    ref_out, ref_scores = reference(query, memory, attention_mask=mask,
                                    return_attention_scores=True)
    if with_cache:  # a static (cross-attention) cache gives the same weights as the memory
        out, _, scores = ours(query, None, ops.convert_to_tensor(mask),
                              cache=ours.project_key_value(memory), return_attention_scores=True)
    else:
        out, scores = ours(query, memory, ops.convert_to_tensor(mask),
                           return_attention_scores=True)
    scores = to_numpy(scores)
    assert scores.shape == (2, 4, 5, 7)
    np.testing.assert_allclose(scores, to_numpy(ref_scores), atol=1e-6)
    np.testing.assert_allclose(to_numpy(out), to_numpy(ref_out), atol=1e-5)
    assert np.all(scores[1, :, :, 3:] == 0)  # the second row's padded keys

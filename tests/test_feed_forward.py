"""The position-wise feed-forward network against eq. 2 in NumPy.

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS).
"""

import numpy as np
import pytest
from keras import ops

from tfformer.model.layers import PositionwiseFeedForward


@pytest.mark.parametrize("length", [1, 5])
def test_feed_forward_matches_equation_2(length):
    rng = np.random.default_rng(0)
    ffn = PositionwiseFeedForward(d_model=8, d_ff=32)
    ffn.build((None, None, 8))
    w1, b1, w2, b2 = (rng.normal(size=v.shape).astype("float32") for v in
                      (ffn.inner.kernel, ffn.inner.bias, ffn.outer.kernel, ffn.outer.bias))
    for variable, value in zip((ffn.inner.kernel, ffn.inner.bias, ffn.outer.kernel,
                                ffn.outer.bias), (w1, b1, w2, b2)):
        variable.assign(value)
    x = rng.normal(size=(3, length, 8)).astype("float32")
    expected = np.maximum(0, x @ w1 + b1) @ w2 + b2  # FFN(x) = max(0, xW1 + b1)W2 + b2
    out = ffn(ops.convert_to_tensor(x))
    assert out.shape == (3, length, 8)
    np.testing.assert_allclose(ops.convert_to_numpy(out), expected, rtol=1e-5, atol=1e-4)
    assert np.any(x @ w1 + b1 < 0)  # the ReLU is exercised


def test_feed_forward_weights_keep_the_dense_layout():
    ffn = PositionwiseFeedForward(d_model=8, d_ff=32, name="ffn")
    ffn.build((None, None, 8))
    assert [tuple(w.shape) for w in ffn.weights] == [(8, 32), (32,), (32, 8), (8,)]
    assert [w.path for w in ffn.weights] == [
        "ffn/inner/kernel", "ffn/inner/bias",
        "ffn/outer/kernel", "ffn/outer/bias"]


def test_a_step_of_one_position_reshapes_back_to_a_constant_shape():
    """In a decoding step ([batch, 1, d_model], batch unknown) the output's shape is [-1, 1, d]:
    a constant, not the Shape, StridedSlice and Pack ops a computed one adds to every step.
    With T unknown too (training), T comes from the input and the output keeps its shape."""
    tf = pytest.importorskip("tensorflow")
    ffn = PositionwiseFeedForward(d_model=8, d_ff=32)
    ffn.build((None, None, 8))
    ops_of = {}
    for name, spec in (("step", [None, 1, 8]), ("training", [None, None, 8])):
        graph = tf.function(ffn).get_concrete_function(tf.TensorSpec(spec, tf.float32)).graph
        ops_of[name] = {op.type for op in graph.get_operations()}
    assert not ops_of["step"] & {"Shape", "StridedSlice", "Pack"}, ops_of["step"]
    assert "Shape" in ops_of["training"]
    out = ffn(tf.zeros([2, 7, 8]))
    assert tuple(out.shape) == (2, 7, 8)

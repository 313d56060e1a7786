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

"""The model side on every Keras backend: `import tfformer` stays light, TensorFlow and JAX compute
the same logits, loss and update from the same weights (and read each other's weight files), and
the fused `keras.ops.dot_product_attention` is eq. 1.

`make test` runs this file on TensorFlow and on JAX without TensorFlow installed
(`TFFORMER_EXPECT_NO_TENSORFLOW=1`); tests that need the other backend in a subprocess skip
where it is not installed (and fail instead under CI=1, where `make test` installs both).
"""

import functools
import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from tfformer import Transformer, compile_transformer
from tfformer.config import TransformerConfig
from tfformer.model.layers import attention
from tfformer.model.layers.attention import (
    MultiHeadAttention,
    ScaledDotProductAttention,
    causal_mask,
    padding_mask,
)
from tfformer.model.losses import MaskedLabelSmoothedCrossEntropy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = keras.backend.backend()
HEAVY = ("tensorflow", "tensorflow_text", "sacrebleu")
to_numpy = ops.convert_to_numpy


def require(module: str, why: str) -> None:
    """Skips (fails under CI=1, where `make test` installs it) when `module` is missing."""
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed: {why}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def run_python(code: str, *args: str, backend: str, timeout: int = 300):
    """Runs `code` in a fresh interpreter on `backend`; returns its last stdout line as JSON."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- import tfformer is light ------------------------------------------------------------------

LIGHT_IMPORT = """
import json
import sys

import numpy as np


def loaded(names=("keras", "jax") + {heavy!r}):
    return sorted(name for name in names if name in sys.modules)


import tfformer

after_import = loaded()
from tfformer import Transformer, compile_transformer
from tfformer.config import TransformerConfig

after_names = loaded()
config = TransformerConfig(vocab_size=20, d_model=8, num_heads=2, d_ff=16, num_encoder_layers=1,
                           num_decoder_layers=1)
model = compile_transformer(Transformer(config))
rng = np.random.default_rng(0)
source = rng.integers(1, 20, size=(2, 6)).astype("int32")
target = rng.integers(1, 20, size=(2, 5)).astype("int32")
history = model.fit((source, target), target, batch_size=2, epochs=1, verbose=0)
import keras

print(json.dumps({{"after_import": after_import, "after_names": after_names,
                  "after_fit": loaded(), "backend": keras.backend.backend(),
                  "steps": int(model.optimizer.iterations),
                  "loss": float(history.history["loss"][0])}}))
""".format(heavy=HEAVY)


def test_import_tfformer_is_light_and_a_jax_fit_step_needs_no_tensorflow():
    require("jax", "the check runs tfformer on JAX in a subprocess")
    report = run_python(LIGHT_IMPORT, backend="jax")
    assert report["after_import"] == []  # no keras, jax, tensorflow, tensorflow_text, sacrebleu
    assert not set(HEAVY) & set(report["after_names"]), report
    assert not set(HEAVY) & set(report["after_fit"]), report
    # Not vacuous: the model was built and trained, on JAX.
    assert report["backend"] == "jax" and {"keras", "jax"} <= set(report["after_fit"])
    assert report["steps"] == 1 and np.isfinite(report["loss"]) and report["loss"] > 0


@pytest.mark.skipif(os.environ.get("TFFORMER_EXPECT_NO_TENSORFLOW") != "1",
                    reason="only in make test's run without TensorFlow (.venv-notf)")
def test_the_run_without_tensorflow_has_no_tensorflow():
    assert importlib.util.find_spec("tensorflow") is None
    with pytest.raises(ImportError):
        import tensorflow  # noqa: F401
    # (sacrebleu is installed there: dev BLEU and tfformer-evaluate run without TensorFlow.)
    assert BACKEND == "jax" and not {"tensorflow", "tensorflow_text"} & set(sys.modules)


# --- TensorFlow and JAX: same weights, same numbers ----------------------------------------------

PARITY_CONFIG = dict(vocab_size=40, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2,
                     num_decoder_layers=2, dropout=0.0)
# The paper's Adam and schedule, with a warmup that makes the first step's learning rate 5.6e-3
# (the default 4000 gives 7e-7, which no 1e-4 comparison of the updated weights could see).
PARITY_WARMUP = 10
# Seeds the initial weights. Adam's first step is lr * g / (|g| + 1e-9): an element whose true
# gradient is within a few 1e-9 of 0 moves by a fraction of lr that rounding decides. With fresh
# random weights some element lands there now and then (seen: |g| = 1.2e-9, 3e-5 apart); with
# this seed the smallest non-zero gradient outside the key biases is 8e-8 (rounding: ~1e-10).
PARITY_SEED = 6


def parity_batch():
    """A batch with padding in the source, the target input and the labels."""
    rng = np.random.default_rng(7)
    source = rng.integers(4, 40, size=(4, 9)).astype("int32")
    target_in = rng.integers(4, 40, size=(4, 7)).astype("int32")
    target_in[:, 0] = 1  # BOS
    target_out = np.concatenate([target_in[:, 1:], np.full((4, 1), 2, "int32")], axis=1)
    source[0, 6:] = 0
    source[2, 4:] = 0
    target_in[0, 5:] = 0
    target_out[0, 4:] = 0
    return {"source": source, "target_in": target_in, "target_out": target_out}


def parity_side(directory: str) -> None:
    """This backend's numbers for the parity test, written to `<backend>.npz` in `directory`.

    Builds the model and loads `initial.weights.h5` (saving it first when missing), computes the
    logits and the label-smoothed loss of `batch.npz`, compiles with `compile_transformer` and
    takes one `train_on_batch` step; keeps the updated weights (.npz, .weights.h5 and .keras).
    Runs in the test's process and in a subprocess on the other backend.
    """
    backend = keras.backend.backend()
    batch = dict(np.load(os.path.join(directory, "batch.npz")))
    inputs = (batch["source"], batch["target_in"])
    initial = os.path.join(directory, "initial.weights.h5")
    if not os.path.exists(initial):
        keras.utils.set_random_seed(PARITY_SEED)
    model = Transformer(TransformerConfig(**PARITY_CONFIG), name="parity")
    model.build()
    if os.path.exists(initial):
        model.load_weights(initial)
    else:
        model.save_weights(initial)
    logits = model(inputs)
    loss = MaskedLabelSmoothedCrossEntropy(0.1)(batch["target_out"], logits)
    compile_transformer(model, warmup_steps=PARITY_WARMUP)
    logs = model.train_on_batch(inputs, batch["target_out"], return_dict=True)
    model.save_weights(os.path.join(directory, f"{backend}-updated.weights.h5"))
    model.save(os.path.join(directory, f"{backend}-updated.keras"))
    paths = [weight.path for weight in model.weights]
    np.savez(os.path.join(directory, f"{backend}.npz"), logits=to_numpy(logits),
             loss=to_numpy(loss), train_loss=np.float32(logs["loss"]),
             updated_logits=to_numpy(model(inputs)), paths=np.array(paths),
             steps=np.int64(int(model.optimizer.iterations)),
             **{f"weight_{i}": to_numpy(weight) for i, weight in enumerate(model.weights)})


def load_side(path):
    with np.load(path) as data:
        side = {key: data[key] for key in data.files}
    side["weights"] = {str(p): side.pop(f"weight_{i}") for i, p in enumerate(side["paths"])}
    return side


PARITY_SUBPROCESS = """
import sys
from tests.test_backends import parity_side
parity_side(sys.argv[1])
print("{}")
"""


@pytest.mark.skipif(BACKEND != "tensorflow",
                    reason="the TensorFlow run checks both directions (JAX in a subprocess)")
def test_tensorflow_and_jax_agree_on_logits_loss_one_update_and_each_others_files(tmp_path):
    require("jax", "the other side of the parity check")
    np.savez(tmp_path / "batch.npz", **parity_batch())
    parity_side(str(tmp_path))  # TensorFlow, in this process; writes initial.weights.h5
    run_python(PARITY_SUBPROCESS, str(tmp_path), backend="jax")
    tf_side = load_side(tmp_path / "tensorflow.npz")
    jax_side = load_side(tmp_path / "jax.npz")

    # Same weights, dropout off, fp32: the forward pass and the loss agree to float rounding.
    assert tf_side["logits"].shape == (4, 7, 40)
    np.testing.assert_allclose(jax_side["logits"], tf_side["logits"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(jax_side["loss"], tf_side["loss"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(jax_side["train_loss"], tf_side["train_loss"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(tf_side["train_loss"], tf_side["loss"], atol=1e-5, rtol=0)
    # One step of the paper's Adam + Noam schedule.
    assert tf_side["steps"] == jax_side["steps"] == 1
    assert list(tf_side["weights"]) == list(jax_side["weights"])
    initial = read_weights(tmp_path / "initial.weights.h5")
    largest_update, compared = 0.0, 0
    for path, want in tf_side["weights"].items():
        largest_update = max(largest_update, np.abs(want - initial[path]).max())
        # Adam's first step is lr * g / |g|: a gradient whose true value is 0 moves by +-lr on
        # rounding noise alone. The key biases' is (softmax is shift invariant: a key bias adds
        # the same q.b to every score of a row), so they are left out.
        if path.endswith("key_bias"):
            continue
        np.testing.assert_allclose(jax_side["weights"][path], want, atol=1e-4, rtol=0,
                                   err_msg=path)
        compared += 1
    assert compared == len(tf_side["weights"]) - 6  # all but the 6 attention layers' key biases
    # The update is the step-1 learning rate (Adam's first step moves by lr where |g| >> 1e-9),
    # far above the tolerance: the comparison sees every sign of the gradient.
    assert largest_update == pytest.approx(32 ** -0.5 * PARITY_WARMUP ** -1.5, rel=1e-3)
    # The key biases cannot change the logits: after the update they agree too.
    np.testing.assert_allclose(jax_side["updated_logits"], tf_side["updated_logits"], atol=1e-5,
                               rtol=0)

    # The reverse direction: files written on JAX load on TensorFlow, to the bit.
    batch = parity_batch()
    inputs = (batch["source"], batch["target_in"])
    from_weights = Transformer(TransformerConfig(**PARITY_CONFIG), name="parity")
    from_weights.build()
    from_weights.load_weights(tmp_path / "jax-updated.weights.h5")
    restored = keras.models.load_model(tmp_path / "jax-updated.keras")
    assert int(restored.optimizer.iterations) == 1
    for model in (from_weights, restored):
        for weight in model.weights:
            np.testing.assert_array_equal(to_numpy(weight), jax_side["weights"][weight.path],
                                          err_msg=weight.path)
        np.testing.assert_allclose(to_numpy(model(inputs)), jax_side["updated_logits"],
                                   atol=1e-5, rtol=0)


def read_weights(path):
    """{weight path: value} of a .weights.h5 file, read into a fresh model on this backend."""
    model = Transformer(TransformerConfig(**PARITY_CONFIG), name="parity")
    model.build()
    model.load_weights(path)
    return {weight.path: to_numpy(weight) for weight in model.weights}


# --- fused attention is eq. 1 ---------------------------------------------------------------------


def numpy_attention(q, k, v, mask):
    """softmax(Q K^T / sqrt(d_k)) V in the heads-last layout [batch, T, h, d_k]; mask
    [batch, 1, T_q, T_k] (True: attend)."""
    q, k, v = (np.swapaxes(x, 1, 2).astype("float64") for x in (q, k, v))  # [batch, h, T, d]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.swapaxes(weights @ v, 1, 2)


def attention_case(kind):
    """(q, k, v in [batch, T, h, d_k], boolean mask [batch, 1, T_q, T_k]): self-attention with
    padding + causal masks, or cross-attention with source padding."""
    rng = np.random.default_rng(11)
    key_length = 6 if kind == "self" else 8
    query_length = 6 if kind == "self" else 4
    q = rng.normal(size=(3, query_length, 2, 8)).astype("float32")
    k, v = (rng.normal(size=(3, key_length, 2, 8)).astype("float32") for _ in range(2))
    ids = np.where(np.arange(key_length)[None, :] < np.array([[key_length], [3], [5]]), 7, 0)
    mask = padding_mask(ids, 0)
    if kind == "self":
        mask = ops.logical_and(mask, causal_mask(query_length))
    mask = np.broadcast_to(to_numpy(mask), (3, query_length, key_length))[:, None]
    return q, k, v, mask


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_dot_product_attention_and_fused_attention_equal_numpy_eq_1(kind):
    q, k, v, mask = attention_case(kind)
    expected = numpy_attention(q, k, v, mask)
    assert np.abs(expected).max() > 0.1
    got = ops.dot_product_attention(q, k, v, mask=ops.convert_to_tensor(mask),
                                    scale=1.0 / np.sqrt(8))
    np.testing.assert_allclose(to_numpy(got), expected, atol=1e-5)
    fused = attention.fused_attention(ops.convert_to_tensor(q), ops.convert_to_tensor(k),
                                    ops.convert_to_tensor(v), ops.convert_to_tensor(mask))
    if BACKEND == "tensorflow":
        assert fused is None  # TensorFlow's fast form is the explicit one
    else:
        np.testing.assert_allclose(to_numpy(fused), expected, atol=1e-5)


@pytest.fixture
def attention_calls(monkeypatch):
    """Counts calls of the fused form (and how many of them computed it) and of the explicit
    ScaledDotProductAttention."""
    calls = {"fused": 0, "fused_computed": 0, "explicit": 0}
    fused, explicit = attention.fused_attention, ScaledDotProductAttention.call

    def counting_fused(*args, **kwargs):
        result = fused(*args, **kwargs)
        calls["fused"] += 1
        calls["fused_computed"] += result is not None
        return result

    @functools.wraps(explicit)  # Keras reads the signature (its `training` argument)
    def counting_explicit(self, *args, **kwargs):
        calls["explicit"] += 1
        return explicit(self, *args, **kwargs)

    monkeypatch.setattr(attention, "fused_attention", counting_fused)
    monkeypatch.setattr(ScaledDotProductAttention, "call", counting_explicit)
    return calls


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_multi_head_attention_default_path_equals_the_explicit_path(attention_calls, kind):
    rng = np.random.default_rng(12)
    query = rng.normal(size=(3, 6 if kind == "self" else 4, 16)).astype("float32")
    memory = query if kind == "self" else rng.normal(size=(3, 8, 16)).astype("float32")
    mask = ops.convert_to_tensor(attention_case(kind)[3][:, 0])  # [batch, T_q, T_k]
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    layer(query, memory)
    layer.set_weights([rng.normal(scale=0.3, size=w.shape).astype("float32")
                       for w in layer.get_weights()])  # random biases too
    attention_calls.update(fused=0, fused_computed=0, explicit=0)

    default = to_numpy(layer(query, memory, mask))
    if BACKEND == "tensorflow":  # the explicit form is TensorFlow's fast one
        assert attention_calls == {"fused": 1, "fused_computed": 0, "explicit": 1}
    else:  # keras.ops.dot_product_attention
        assert attention_calls == {"fused": 1, "fused_computed": 1, "explicit": 0}
    explicit, scores = layer(query, memory, mask, return_attention_scores=True)
    assert attention_calls["explicit"] == (2 if BACKEND == "tensorflow" else 1)
    assert attention_calls["fused"] == 1  # asking for the weights skips the fused form
    np.testing.assert_allclose(default, to_numpy(explicit), atol=1e-5)
    assert np.abs(default).max() > 0.1
    assert np.all(to_numpy(scores)[1, :, :, 3:] == 0)  # padded keys of the second row


def test_attention_dropout_in_training_takes_the_explicit_path(attention_calls):
    query = np.random.default_rng(13).normal(size=(2, 5, 16)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.5)
    layer(query, query)
    attention_calls.update(fused=0, fused_computed=0, explicit=0)
    layer(query, query, training=True)
    assert attention_calls == {"fused": 0, "fused_computed": 0, "explicit": 1}
    inference = to_numpy(layer(query, query, training=False))  # no dropout: the default path
    assert attention_calls["fused"] == 1
    assert attention_calls["explicit"] == (2 if BACKEND == "tensorflow" else 1)
    explicit, _ = layer(query, query, training=False, return_attention_scores=True)
    np.testing.assert_allclose(inference, to_numpy(explicit), atol=1e-5)

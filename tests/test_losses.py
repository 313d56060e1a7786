"""Label-smoothed loss, masked metrics, and their behaviour under tf.distribute.

Backend-neutral but for the tf.distribute test: `make test` runs it on TensorFlow and on JAX
without TensorFlow installed (the Makefile's BACKEND_TESTS).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfformer.model.losses import MaskedAccuracy, MaskedLabelSmoothedCrossEntropy, Perplexity

HERE = os.path.dirname(__file__)


def numpy_smoothed_loss(labels, logits, eps, pad=0):
    """Cross-entropy against q = (1 - eps) one_hot + eps / V, averaged over non-pad tokens."""
    vocab = logits.shape[-1]
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    q = np.full(logits.shape, eps / vocab)
    q += (1 - eps) * np.eye(vocab)[labels]
    per_token = -(q * log_probs).sum(-1)
    mask = labels != pad
    return per_token[mask].mean(), log_probs, mask


def make_batch(seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(3, 5, 11)).astype("float32") * 3
    labels = rng.integers(1, 11, size=(3, 5))
    labels[0, 2:] = 0
    labels[2, 4] = 0
    return labels, logits


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_loss_equals_numpy_reference(eps):
    labels, logits = make_batch()
    expected, _, _ = numpy_smoothed_loss(labels, logits, eps)
    got = MaskedLabelSmoothedCrossEntropy(eps)(labels, logits)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


def test_loss_ignores_whatever_sits_at_pad_positions():
    labels, logits = make_batch()
    noisy = logits.copy()
    noisy[0, 2:] = 1000 * np.random.default_rng(1).normal(size=noisy[0, 2:].shape)
    loss = MaskedLabelSmoothedCrossEntropy(0.1)
    assert float(loss(labels, noisy)) == pytest.approx(float(loss(labels, logits)), rel=1e-6)


def test_accuracy_and_perplexity_count_only_real_tokens():
    labels, logits = make_batch()
    _, log_probs, mask = numpy_smoothed_loss(labels, logits, 0.0)
    accuracy = MaskedAccuracy()
    accuracy.update_state(labels, logits)
    expected_accuracy = (logits.argmax(-1) == labels)[mask].mean()
    assert float(accuracy.result()) == pytest.approx(expected_accuracy)
    perplexity = Perplexity()
    perplexity.update_state(labels, logits)
    nll = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    assert float(perplexity.result()) == pytest.approx(np.exp(nll[mask].mean()), rel=1e-5)
    # Accumulates across batches as a token-weighted mean, not a mean of batch means.
    other_labels, other_logits = make_batch(seed=3)
    other_labels[:, 1:] = 0
    accuracy.update_state(other_labels, other_logits)
    all_correct = np.concatenate([(logits.argmax(-1) == labels)[mask],
                                  (other_logits.argmax(-1) == other_labels)[other_labels != 0]])
    assert float(accuracy.result()) == pytest.approx(all_correct.mean())


def test_loss_serializes():
    loss = MaskedLabelSmoothedCrossEntropy(0.2)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert clone.label_smoothing == 0.2


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="tf.distribute: the token count summed across TensorFlow replicas")
def test_two_replica_mirrored_step_equals_single_device_step():
    """Runs in a fresh process: logical devices must be set before TensorFlow starts."""
    result = subprocess.run([sys.executable, os.path.join(HERE, "mirrored_step.py")],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.path.dirname(HERE)})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    # The replicas' halves hold different token counts, so a mean of per-replica means would
    # differ: the loss must be the global token mean.
    assert report["tokens_per_replica"][0] != report["tokens_per_replica"][1]
    assert report["mirrored_loss"] == pytest.approx(report["single_loss"], rel=1e-5)
    assert report["mirrored_loss"] == pytest.approx(report["numpy_loss"], rel=1e-5)
    assert report["max_update"] > 1e-2  # an update happened: the comparison is not vacuous
    assert report["max_update_diff"] < 1e-6


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_and_perplexity_without_bos_equal_numpy_on_the_other_ids(eps):
    """bos_in_softmax=False (an imported Marian model): the softmax and label smoothing's
    uniform target are over the V - 1 ids but BOS, as if its column were not there."""
    from tfformer.special_tokens import BOS_ID

    labels, logits = make_batch()
    labels[labels == BOS_ID] = BOS_ID + 1  # BOS is never a target
    without = np.delete(logits, BOS_ID, axis=-1)
    shifted = np.where(labels > BOS_ID, labels - 1, labels)
    expected, log_probs, mask = numpy_smoothed_loss(shifted, without, eps)
    got = MaskedLabelSmoothedCrossEntropy(eps, bos_in_softmax=False)(labels, logits)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)
    assert abs(float(MaskedLabelSmoothedCrossEntropy(eps)(labels, logits)) - expected) > 1e-3
    perplexity = Perplexity(bos_in_softmax=False)
    perplexity.update_state(labels, logits)
    nll = -np.take_along_axis(log_probs, shifted[..., None], -1)[..., 0]
    np.testing.assert_allclose(float(perplexity.result()), np.exp(nll[mask].mean()), rtol=1e-5)

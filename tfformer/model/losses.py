"""Training objective and metrics: label-smoothed cross-entropy (§5.4), token accuracy, perplexity.

All of them ignore pad positions (PAD_ID in the targets). With `bos_in_softmax` false (an
imported Marian model: `TransformerConfig.bos_in_softmax`) the loss and perplexity leave the
BOS column out of the softmax and of label smoothing's uniform target.
"""

from __future__ import annotations

import keras
from keras import ops

from tfformer.model.layers import kernels
from tfformer.model.layers.kernels import ON_TENSORFLOW
from tfformer.special_tokens import BOS_ID, PAD_ID

if ON_TENSORFLOW:
    import tensorflow as tf


def label_smoothed_cross_entropy(labels, logits, label_smoothing: float,
                                 bos_in_softmax: bool = True):
    """Per-token cross-entropy against (1 - eps) one-hot + eps / V uniform (§5.4).

    Args:
        labels: int [batch, T].
        logits: float [batch, T, V].
        label_smoothing: eps.
        bos_in_softmax: False leaves the BOS column out: the softmax and the uniform target
            are over the other V - 1 ids.

    Returns:
        float32 [batch, T], not masked.
    """
    # log p_y = z_y - logsumexp(z): reductions of the logits, so that the [batch, T, V]
    # log-probabilities are never written out (the float32 cast fuses into each reduction).
    logits = ops.cast(logits, "float32")
    vocab_size = ops.shape(logits)[-1]
    total = None
    if not bos_in_softmax:
        bos_logits = logits[..., BOS_ID]
        if label_smoothing:
            total = ops.sum(logits, axis=-1) - bos_logits
        logits = logits + ops.one_hot(BOS_ID, vocab_size) * kernels.masked_fill_value("float32")
    log_normalizer = ops.logsumexp(logits, axis=-1)
    nll = log_normalizer - kernels.take_last_axis(logits, ops.cast(labels, "int32"))
    if not label_smoothing:
        return nll
    # Cross-entropy against the uniform target: -mean(log p) = logsumexp(z) - mean(z).
    if total is None:
        uniform = log_normalizer - ops.mean(logits, axis=-1)
    else:
        uniform = log_normalizer - total / ops.cast(vocab_size - 1, "float32")
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedLabelSmoothedCrossEntropy(keras.losses.Loss):
    """Label-smoothed sparse cross-entropy averaged over the non-pad tokens of the global batch.

    `call` returns per-token values and Keras reduces them ("sum_over_batch_size", which under
    tf.distribute also divides by the number of replicas exactly once; a loss that returned an
    already-reduced scalar would be counted once per replica). The pad mask enters as a sample
    weight, rescaled so that the reduced value is sum(token losses) / (non-pad tokens in the
    global batch): with several tf.distribute replicas the token count is summed across them,
    so the loss and the gradients equal one device's on the same global batch even when the
    replicas' shares hold different numbers of tokens. (JAX's `keras.distribution` computes on
    the global batch as one program: its count is global already.)

    Args:
        label_smoothing: eps (0.1 in the paper).
        pad_id: target id that carries no loss.
        bos_in_softmax: False leaves BOS out of the softmax (`label_smoothed_cross_entropy`).
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int = PAD_ID,
                 name: str = "label_smoothed_cross_entropy", bos_in_softmax: bool = True,
                 **kwargs):
        kwargs.pop("reduction", None)  # the token-mean weighting below needs sum_over_batch_size
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id
        self.bos_in_softmax = bos_in_softmax

    def __call__(self, y_true, y_pred, sample_weight=None):
        weights = ops.cast(ops.not_equal(ops.cast(y_true, "int32"), self.pad_id), "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(sample_weight, "float32")
        tokens, replicas = sum_over_replicas(ops.sum(weights))
        # Keras computes sum(loss * w) / size / replicas; this w makes it sum(loss * mask) / tokens.
        size = ops.cast(ops.size(weights), "float32")
        weights = weights * ops.divide_no_nan(size * replicas, tokens)
        return super().__call__(y_true, y_pred, sample_weight=weights)

    def call(self, y_true, y_pred):
        return label_smoothed_cross_entropy(y_true, y_pred, self.label_smoothing,
                                            self.bos_in_softmax)

    def get_config(self):
        config = super().get_config()
        config.pop("reduction", None)
        return {**config, "label_smoothing": self.label_smoothing, "pad_id": self.pad_id,
                "bos_in_softmax": self.bos_in_softmax}


class _MaskedTokenMean(keras.metrics.Metric):
    """Accumulates a per-token quantity summed over non-pad tokens, and the token count."""

    def __init__(self, pad_id: int = PAD_ID, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = pad_id
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def per_token(self, labels, logits):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(labels, self.pad_id), "float32")
        if sample_weight is not None:
            mask = mask * ops.cast(sample_weight, "float32")
        values = ops.cast(self.per_token(labels, y_pred), "float32")
        self.total.assign_add(ops.sum(values * mask))
        self.count.assign_add(ops.sum(mask))

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedAccuracy(_MaskedTokenMean):
    """Fraction of non-pad target tokens whose argmax prediction is right."""

    def __init__(self, name: str = "accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_token(self, labels, logits):
        return ops.equal(kernels.argmax_last(logits), labels)

    def result(self):
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="tfformer")
class Perplexity(_MaskedTokenMean):
    """exp(mean negative log-likelihood per non-pad token), without label smoothing."""

    def __init__(self, name: str = "perplexity", bos_in_softmax: bool = True, **kwargs):
        super().__init__(name=name, **kwargs)
        self.bos_in_softmax = bos_in_softmax

    def per_token(self, labels, logits):
        return label_smoothed_cross_entropy(labels, logits, 0.0, self.bos_in_softmax)

    def get_config(self):
        return {**super().get_config(), "bos_in_softmax": self.bos_in_softmax}

    def result(self):
        return ops.exp(ops.divide_no_nan(self.total, self.count))


def sum_over_replicas(value):
    """(value summed over the tf.distribute replicas in sync, their number): what a per-replica
    step needs for a global mean. Other backends compute on the global batch: (value, 1)."""
    if ON_TENSORFLOW:
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            return (context.all_reduce(tf.distribute.ReduceOp.SUM, value),
                    context.num_replicas_in_sync)
    return value, 1

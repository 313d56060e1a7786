"""Training objective and metrics: label-smoothed cross-entropy (§5.4), token accuracy, perplexity.

All of them ignore pad positions (PAD_ID in the targets).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfformer.special_tokens import PAD_ID


def label_smoothed_cross_entropy(labels: tf.Tensor, logits: tf.Tensor,
                                 label_smoothing: float) -> tf.Tensor:
    """Per-token cross-entropy against (1 - eps) one-hot + eps / V uniform (§5.4).

    Args:
        labels: int [batch, T].
        logits: float [batch, T, V].
        label_smoothing: eps.

    Returns:
        float32 [batch, T], not masked.
    """
    logits = tf.cast(logits, tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(log_probs, tf.cast(labels, tf.int32), batch_dims=2)
    if not label_smoothing:
        return nll
    uniform = -tf.reduce_mean(log_probs, axis=-1)  # cross-entropy against the uniform V-way target
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedLabelSmoothedCrossEntropy(keras.losses.Loss):
    """Label-smoothed sparse cross-entropy averaged over the non-pad tokens of the global batch.

    `call` returns per-token values and Keras reduces them ("sum_over_batch_size", which under
    tf.distribute also divides by the number of replicas exactly once; a loss that returned an
    already-reduced scalar would be counted once per replica). The pad mask enters as a sample
    weight, rescaled so that the reduced value is sum(token losses) / (non-pad tokens in the
    global batch): with several replicas the token count is summed across them, so the loss and
    the gradients equal one device's on the same global batch even when the replicas' shares hold
    different numbers of tokens.

    Args:
        label_smoothing: eps (0.1 in the paper).
        pad_id: target id that carries no loss.
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int = PAD_ID,
                 name: str = "label_smoothed_cross_entropy", **kwargs):
        kwargs.pop("reduction", None)  # the token-mean weighting below needs sum_over_batch_size
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def __call__(self, y_true, y_pred, sample_weight=None):
        weights = tf.cast(tf.not_equal(tf.cast(y_true, tf.int32), self.pad_id), tf.float32)
        if sample_weight is not None:
            weights = weights * tf.cast(sample_weight, tf.float32)
        tokens = tf.reduce_sum(weights)
        replica_context = tf.distribute.get_replica_context()
        replicas = 1
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            replicas = replica_context.num_replicas_in_sync
            tokens = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        # Keras computes sum(loss * w) / size / replicas; this w makes it sum(loss * mask) / tokens.
        size = tf.cast(tf.size(weights), tf.float32)
        weights = weights * tf.math.divide_no_nan(size * replicas, tokens)
        return super().__call__(y_true, y_pred, sample_weight=weights)

    def call(self, y_true, y_pred):
        return label_smoothed_cross_entropy(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        config = super().get_config()
        config.pop("reduction", None)
        return {**config, "label_smoothing": self.label_smoothing, "pad_id": self.pad_id}


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
        labels = tf.cast(y_true, tf.int32)
        mask = tf.cast(tf.not_equal(labels, self.pad_id), tf.float32)
        if sample_weight is not None:
            mask = mask * tf.cast(sample_weight, tf.float32)
        values = tf.cast(self.per_token(labels, y_pred), tf.float32)
        self.total.assign_add(tf.reduce_sum(values * mask))
        self.count.assign_add(tf.reduce_sum(mask))

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
        return tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels)

    def result(self):
        return tf.math.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="tfformer")
class Perplexity(_MaskedTokenMean):
    """exp(mean negative log-likelihood per non-pad token), without label smoothing."""

    def __init__(self, name: str = "perplexity", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_token(self, labels, logits):
        return label_smoothed_cross_entropy(labels, logits, 0.0)

    def result(self):
        return tf.exp(tf.math.divide_no_nan(self.total, self.count))

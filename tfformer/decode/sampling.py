"""Sampling the next token: temperature, top-k, top-p (nucleus), and a random stream per sentence.

Each sentence carries its own seed. The uniform numbers of sentence b at step t are SplitMix64
(Steele et al. 2014) of a counter: key(seed_b) + (t * vocab + id + 1) * golden gamma, in unsigned
64-bit integers. Integer arithmetic is the same in every TensorFlow (the SavedModel, TF 2.20
included) and in NumPy, so the same request gives the same sample in a fresh process, on TF
Serving, and in the NumPy form that the keras.ops search (`tfformer.decode.keras_search`) uses
on other backends; no seed is shared across sentences, so a sentence samples the same alone or
batched with others.

A token is drawn with the Gumbel-max trick: argmax(log p / temperature + G), G = -log(-log(U)),
over the ids that top-k and top-p keep, which is a draw from the renormalized distribution.
"""

from __future__ import annotations

import numpy as np

# TensorFlow is imported by the in-graph forms only: the NumPy forms serve the keras.ops search
# where TensorFlow may not be installed.
# SplitMix64's constants.
_GAMMA = 0x9E3779B97F4A7C15
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB
_SEED_SALT = 0x5851F42D4C957F2D  # a seed of 0 does not start the stream at a zero state


def _mix_tf(z):
    import tensorflow as tf

    z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(30, tf.uint64)))
    z = z * tf.constant(_MIX_1, tf.uint64)
    z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(27, tf.uint64)))
    z = z * tf.constant(_MIX_2, tf.uint64)
    return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(31, tf.uint64)))


def _mix_np(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(30))
        z = z * np.uint64(_MIX_1)
        z = z ^ (z >> np.uint64(27))
        z = z * np.uint64(_MIX_2)
        return z ^ (z >> np.uint64(31))


def uniform(seeds, step, vocab_size: int):
    """float64 tf.Tensor [rows, vocab_size] in (0, 1): sentence b's numbers at `step`, from
    seeds int64 [rows] (>= 0)."""
    import tensorflow as tf

    key = _mix_tf(tf.bitwise.bitwise_xor(tf.cast(seeds, tf.uint64),
                                         tf.constant(_SEED_SALT, tf.uint64)))
    counter = (tf.cast(step, tf.uint64) * tf.constant(vocab_size, tf.uint64)
               + tf.cast(tf.range(1, vocab_size + 1, dtype=tf.int64), tf.uint64))
    z = _mix_tf(key[:, None] + counter[None, :] * tf.constant(_GAMMA, tf.uint64))
    top53 = tf.cast(tf.bitwise.right_shift(z, tf.constant(11, tf.uint64)), tf.float64)
    return (top53 + 0.5) * 2.0 ** -53


def uniform_np(seeds: np.ndarray, step: int, vocab_size: int) -> np.ndarray:
    """`uniform` in NumPy: the same numbers."""
    with np.errstate(over="ignore"):
        key = _mix_np(np.asarray(seeds).astype(np.uint64) ^ np.uint64(_SEED_SALT))
        counter = (np.uint64(step) * np.uint64(vocab_size)
                   + np.arange(1, vocab_size + 1, dtype=np.uint64))
        z = _mix_np(key[:, None] + counter[None, :] * np.uint64(_GAMMA))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


def sample(log_probs, temperature, top_k, top_p, seeds, step):
    """int32 tf.Tensor [rows]: one token per row of log_probs [rows, vocab].

    Args:
        log_probs: the model's log-probabilities after the search's rules (forbidden ids at a
            large negative value).
        temperature: float [rows], > 0: log_probs / temperature before top-k and top-p.
        top_k: int [rows]: keep the top_k likeliest ids (0: all).
        top_p: float [rows] in (0, 1]: keep the likeliest ids whose probability, before each,
            sums to less than top_p (the smallest set that reaches top_p; 1: all).
        seeds: int64 [rows] >= 0, with `step` choosing the row's random numbers.
    """
    import tensorflow as tf

    vocab = tf.shape(log_probs)[-1]
    scaled = log_probs / tf.cast(temperature, log_probs.dtype)[:, None]
    ordered = tf.math.top_k(scaled, k=vocab, sorted=True).values
    ranks = tf.range(vocab)[None, :]
    keep = (ranks < tf.where(top_k > 0, top_k, vocab)[:, None])
    before = tf.math.cumsum(tf.nn.softmax(ordered), axis=-1, exclusive=True)
    keep = keep & (before < tf.cast(top_p, before.dtype)[:, None])
    keep = tf.logical_or(keep, tf.equal(ranks, 0))  # the likeliest id always stays
    kept = tf.reduce_sum(tf.cast(keep, tf.int32), axis=-1)
    threshold = tf.gather(ordered, kept - 1, batch_dims=1)
    gumbel = -tf.math.log(-tf.math.log(uniform(seeds, step, log_probs.shape[-1])))
    noise = tf.cast(gumbel, scaled.dtype)
    candidates = tf.where(scaled >= threshold[:, None], scaled + noise, -np.inf)
    return tf.argmax(candidates, axis=-1, output_type=tf.int32)


def sample_np(log_probs: np.ndarray, temperature, top_k, top_p, seeds, step: int) -> np.ndarray:
    """`sample` in NumPy, on the same random numbers."""
    rows, vocab = log_probs.shape
    scaled = log_probs / np.asarray(temperature, log_probs.dtype)[:, None]
    ordered = -np.sort(-scaled, axis=-1)
    ranks = np.arange(vocab)[None, :]
    top_k = np.asarray(top_k)
    keep = ranks < np.where(top_k > 0, top_k, vocab)[:, None]
    shifted = np.exp(ordered - ordered[:, :1])
    probs = shifted / shifted.sum(axis=-1, keepdims=True)
    before = np.cumsum(probs, axis=-1) - probs
    keep &= before < np.asarray(top_p)[:, None]
    keep |= ranks == 0
    threshold = ordered[np.arange(rows), keep.sum(axis=-1) - 1]
    noise = (-np.log(-np.log(uniform_np(seeds, step, vocab)))).astype(scaled.dtype)
    candidates = np.where(scaled >= threshold[:, None], scaled + noise, -np.inf)
    return candidates.argmax(axis=-1).astype(np.int32)

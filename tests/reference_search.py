"""Beam search in plain Python and NumPy with the rules stated in tfformer/decode/search.py, on
full forward passes of the model (no cache, no search code): the reference of the graph search
(tests/test_search.py) and of the keras.ops search (tests/test_keras_search.py), on any
backend."""

import keras
import numpy as np

from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

FORWARDS = {}  # id(model) -> the model's forward pass as one tf.function (any batch, length)


def next_log_probs(model, source_row, prefixes):
    """log P(next | prefix) for each prefix (all of one length) from a full forward pass: no
    cache, no search code."""
    if id(model) not in FORWARDS:
        forward = lambda source, target: model((source, target))  # noqa: E731
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            forward = tf.function(forward, reduce_retracing=True)
        FORWARDS[id(model)] = forward
    sources = np.repeat(source_row[None], len(prefixes), axis=0)
    # PAD-padded to a multiple of 32 positions, so that JAX compiles a few shapes, not one per
    # length: causality hides what follows the prefix from its last position.
    length = len(prefixes[0])
    padded = np.full([len(prefixes), -(-length // 32) * 32], PAD_ID, "int32")
    padded[:, :length] = prefixes
    logits = keras.ops.convert_to_numpy(
        FORWARDS[id(model)](sources, padded))[:, length - 1]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def ngram_bans(generated, n):
    """Tokens that would repeat an n-gram of `generated` (CTranslate2's NoRepeatNgram)."""
    if len(generated) < n:
        return set()
    last = generated[len(generated) - n + 1:]
    return {generated[i + n - 1] for i in range(len(generated) - n + 1)
            if generated[i:i + n - 1] == last}


def reference_beam_search(model, source_row, k, alpha, extra, no_repeat_ngram=0, prefix=()):
    """Beam search in plain Python/NumPy with the rules stated in tfformer/decode/search.py."""
    lp = lambda length: ((5 + length) / 6) ** alpha  # noqa: E731
    forced = len(prefix)
    max_length = int((source_row != PAD_ID).sum()) + extra + forced
    alive = [([BOS_ID], 0.0)] + [([BOS_ID], -np.inf)] * (k - 1)
    finished = []
    for t in range(max_length):
        candidates = []
        steps = next_log_probs(model, source_row, [prefix for prefix, _ in alive])
        for beam, (sequence, log_prob) in enumerate(alive):
            step = steps[beam]
            if no_repeat_ngram:
                step[list(ngram_bans(sequence[1:], no_repeat_ngram))] = -np.inf
                step -= np.log(np.exp(step - step.max()).sum()) + step.max()
            step[[PAD_ID, BOS_ID]] = -np.inf
            if t + 1 >= max_length:
                step[np.arange(len(step)) != EOS_ID] = -np.inf
            if t < forced:
                step[:] = -np.inf
                step[prefix[t]] = 0.0
            for token, value in enumerate(step):
                candidates.append((log_prob + value, beam * len(step) + token,
                                   sequence + [token]))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        top = candidates[:2 * k]
        if forced and t == forced:  # only the best candidate may finish right after a prefix
            top = [c if rank == 0 or c[2][-1] != EOS_ID else (-np.inf, c[1], c[2][:-1] + [PAD_ID])
                   for rank, c in enumerate(top)]
        for log_prob, _, sequence in top[:k]:
            if sequence[-1] == EOS_ID and log_prob > -np.inf:
                finished.append((sequence, log_prob / lp(t + 1 - forced)))
        finished = sorted(finished, key=lambda f: -f[1])[:k]
        alive = [(seq, log_prob) for log_prob, _, seq in top if seq[-1] != EOS_ID][:k]
        if len(finished) == k and alive[0][1] / lp(max_length - forced) <= finished[-1][1]:
            break
    return [(seq[1:], score) for seq, score in finished]


def strip(tokens):
    """Token list up to and including EOS."""
    tokens = list(tokens)
    return tokens[:tokens.index(EOS_ID) + 1]

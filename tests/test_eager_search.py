"""The step-by-step greedy search of tfformer.decode.eager_search (dev BLEU off TensorFlow) and the
fixed-capacity decoder cache it uses, on every backend: against greedy decoding by full
recomputation (no cache, no search code), and on TensorFlow against the in-graph search."""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decode.eager_search import greedy_search
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

EXTRA = 6


def reference_greedy(model, source_row, extra):
    """Greedy decoding of one sentence by full forward passes, with the rules of
    tfformer/search.py: no PAD or BOS, only EOS at the length limit."""
    max_length = int((source_row != PAD_ID).sum()) + extra
    prefix, score = [BOS_ID], 0.0
    while len(prefix) <= max_length:
        # Padded to one length (one shape for JAX to compile): causality hides what follows.
        padded = np.array([prefix + [PAD_ID] * (len(source_row) + extra + 1 - len(prefix))])
        logits = ops.convert_to_numpy(model((source_row[None], padded.astype("int32"))))
        logits = logits[:, len(prefix) - 1:len(prefix)]
        log_probs = logits[0, -1] - logits[0, -1].max()
        log_probs -= np.log(np.exp(log_probs).sum())
        log_probs[[PAD_ID, BOS_ID]] = -np.inf
        if len(prefix) == max_length:
            log_probs[np.arange(len(log_probs)) != EOS_ID] = -np.inf
        token = int(log_probs.argmax())
        prefix.append(token)
        score += log_probs[token]
        if token == EOS_ID:
            break
    return prefix[1:], score


def test_greedy_search_equals_greedy_by_full_recomputation(search_model, search_sources):
    tokens, scores = greedy_search(search_model, search_sources, EXTRA)
    lengths = []
    for row, source in enumerate(search_sources):
        expected, score = reference_greedy(search_model, source, EXTRA)
        got = [int(t) for t in tokens[row] if t != PAD_ID]
        assert got == expected, row
        assert int((tokens[row] != PAD_ID).sum()) == len(expected)  # PAD only after EOS
        np.testing.assert_allclose(scores[row], score, atol=1e-4)
        lengths.append(len(expected))
    assert len(set(lengths)) > 1  # hypotheses of several lengths: finished rows are kept


def test_fixed_capacity_cache_equals_a_full_pass(search_model, search_sources):
    """Three target positions decoded one by one into a cache of capacity 5 (written in place,
    the rest hidden) give the logits of one teacher-forced pass."""
    rng = np.random.default_rng(0)
    target = rng.integers(4, 30, size=(len(search_sources), 3)).astype("int32")
    target[:, 0] = BOS_ID
    full = ops.convert_to_numpy(search_model((search_sources, target)))
    memory, source_mask = search_model.encode(search_sources)
    cache = search_model.init_cache(memory, capacity=5)
    for t in range(3):
        logits, cache = search_model.decode(target[:, t:t + 1], None, source_mask, cache=cache,
                                     cache_index=t)
        np.testing.assert_allclose(ops.convert_to_numpy(logits)[:, 0], full[:, t], atol=1e-5)
    assert search_model.decoder.cached_length(cache) == 5  # the capacity, whatever was written


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the in-graph search is TensorFlow's")
def test_greedy_search_equals_the_in_graph_search(search_model, search_sources):
    from tfformer.decode.search import greedy_search as graph_greedy_search

    tokens, scores = greedy_search(search_model, search_sources, EXTRA)
    graph = graph_greedy_search(search_model, search_sources, EXTRA)
    np.testing.assert_array_equal(tokens, graph.tokens.numpy()[:, 0])
    np.testing.assert_allclose(scores, graph.scores.numpy()[:, 0], atol=1e-5)

"""The step-by-step greedy search of tfformer.eager_search (dev BLEU off TensorFlow) and the
fixed-capacity decoder cache it uses, on every backend: against greedy decoding by full
recomputation (no cache, no search code), and on TensorFlow against the in-graph search."""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer import Transformer, TransformerConfig
from tfformer.eager_search import greedy_search
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

EXTRA = 6


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    config = TransformerConfig(vocab_size=30, d_model=32, num_heads=4, d_ff=64,
                               num_encoder_layers=2, num_decoder_layers=2, dropout=0.0)
    model = Transformer(config)
    model.build()
    # Make EOS likelier so that hypotheses end at different lengths, before the limit.
    weights = ops.convert_to_numpy(model.embedding.embeddings)
    weights[EOS_ID] *= 3.0
    model.embedding.embeddings.assign(weights)
    return model


@pytest.fixture(scope="module")
def sources():
    rng = np.random.default_rng(3)
    ids = rng.integers(4, 30, size=(4, 8)).astype("int32")
    for row, length in enumerate([8, 3, 6, 5]):  # EOS-terminated, then padded
        ids[row, length - 1] = EOS_ID
        ids[row, length:] = PAD_ID
    return ids


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


def test_greedy_search_equals_greedy_by_full_recomputation(model, sources):
    tokens, scores = greedy_search(model, sources, EXTRA)
    lengths = []
    for row, source in enumerate(sources):
        expected, score = reference_greedy(model, source, EXTRA)
        got = [int(t) for t in tokens[row] if t != PAD_ID]
        assert got == expected, row
        assert int((tokens[row] != PAD_ID).sum()) == len(expected)  # PAD only after EOS
        np.testing.assert_allclose(scores[row], score, atol=1e-4)
        lengths.append(len(expected))
    assert len(set(lengths)) > 1  # hypotheses of several lengths: finished rows are kept


def test_fixed_capacity_cache_equals_a_full_pass(model, sources):
    """Three target positions decoded one by one into a cache of capacity 5 (written in place,
    the rest hidden) give the logits of one teacher-forced pass."""
    rng = np.random.default_rng(0)
    target = rng.integers(4, 30, size=(len(sources), 3)).astype("int32")
    target[:, 0] = BOS_ID
    full = ops.convert_to_numpy(model((sources, target)))
    memory, source_mask = model.encode(sources)
    cache = model.init_cache(memory, capacity=5)
    for t in range(3):
        logits, cache = model.decode(target[:, t:t + 1], None, source_mask, cache=cache,
                                     cache_index=t)
        np.testing.assert_allclose(ops.convert_to_numpy(logits)[:, 0], full[:, t], atol=1e-5)
    assert model.decoder.cached_length(cache) == 5  # the capacity, whatever was written


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the in-graph search is TensorFlow's")
def test_greedy_search_equals_the_in_graph_search(model, sources):
    from tfformer.search import greedy_search as graph_greedy_search

    tokens, scores = greedy_search(model, sources, EXTRA)
    graph = graph_greedy_search(model, sources, EXTRA)
    np.testing.assert_array_equal(tokens, graph.tokens.numpy()[:, 0])
    np.testing.assert_allclose(scores, graph.scores.numpy()[:, 0], atol=1e-5)

"""Graph greedy/beam search against a plain NumPy beam search and against each other."""

import numpy as np
import pytest
import tensorflow as tf

from tfformer.decode.search import beam_search, greedy_search
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

EXTRA = 6


FORWARDS = {}  # id(model) -> the model's forward pass as one tf.function (any batch, length)


def next_log_probs(model, source_row, prefixes):
    """log P(next | prefix) for each prefix (all of one length) from a full forward pass: no
    cache, no search code."""
    if id(model) not in FORWARDS:
        FORWARDS[id(model)] = tf.function(lambda source, target: model((source, target)),
                                          reduce_retracing=True)
    sources = np.repeat(source_row[None], len(prefixes), axis=0)
    logits = FORWARDS[id(model)](sources, np.array(prefixes, "int32")).numpy()[:, -1]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def reference_beam_search(model, source_row, k, alpha, extra):
    """Beam search in plain Python/NumPy with the rules stated in tfformer/search.py."""
    lp = lambda length: ((5 + length) / 6) ** alpha  # noqa: E731
    max_length = int((source_row != PAD_ID).sum()) + extra
    alive = [([BOS_ID], 0.0)] + [([BOS_ID], -np.inf)] * (k - 1)
    finished = []
    for t in range(max_length):
        candidates = []
        steps = next_log_probs(model, source_row, [prefix for prefix, _ in alive])
        for beam, (prefix, log_prob) in enumerate(alive):
            step = steps[beam]
            step[[PAD_ID, BOS_ID]] = -np.inf
            if t + 1 >= max_length:
                step[np.arange(len(step)) != EOS_ID] = -np.inf
            for token, value in enumerate(step):
                candidates.append((log_prob + value, beam * len(step) + token, prefix + [token]))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        top = candidates[:2 * k]
        for log_prob, _, sequence in top[:k]:
            if sequence[-1] == EOS_ID and log_prob > -np.inf:
                finished.append((sequence, log_prob / lp(t + 1)))
        finished = sorted(finished, key=lambda f: -f[1])[:k]
        alive = [(seq, log_prob) for log_prob, _, seq in top if seq[-1] != EOS_ID][:k]
        if len(finished) == k and alive[0][1] / lp(max_length) <= finished[-1][1]:
            break
    return [(seq[1:], score) for seq, score in finished]


def strip(tokens):
    """Token list up to and including EOS."""
    tokens = list(tokens)
    return tokens[:tokens.index(EOS_ID) + 1]


@pytest.mark.parametrize("k, alpha", [(4, 0.6), (3, 0.0), (2, 1.0)])
def test_graph_beam_search_equals_numpy_reference(search_model, search_sources, k, alpha):
    result = beam_search(search_model, search_sources, beam_size=k, alpha=alpha,
                         max_output_extra=EXTRA,
                         n_best=k)
    lengths_seen = set()
    for row in range(len(search_sources)):
        expected = reference_beam_search(search_model, search_sources[row], k, alpha, EXTRA)
        assert len(expected) == k
        for rank, (sequence, score) in enumerate(expected):
            got = strip(result.tokens.numpy()[row, rank])
            assert got == sequence, (row, rank)
            assert result.scores.numpy()[row, rank] == pytest.approx(score, abs=1e-4)
            lengths_seen.add(len(sequence))
    assert len(lengths_seen) > 2  # hypotheses of several lengths: the test is not degenerate


def test_greedy_equals_beam_of_one_without_length_penalty(search_model, search_sources):
    greedy = greedy_search(search_model, search_sources, max_output_extra=EXTRA)
    beam = beam_search(search_model, search_sources, beam_size=1, alpha=0.0, max_output_extra=EXTRA)
    np.testing.assert_array_equal(greedy.tokens.numpy(), beam.tokens.numpy())
    np.testing.assert_allclose(greedy.scores.numpy(), beam.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_cached_search_equals_full_recomputation(search_model, search_sources, search):
    run = (lambda **kw: greedy_search(search_model, search_sources, EXTRA, **kw)) \
        if search == "greedy" else (
        lambda **kw: beam_search(search_model, search_sources, 4, 0.6, EXTRA, n_best=4, **kw))
    cached, full = run(use_cache=True), run(use_cache=False)
    np.testing.assert_array_equal(cached.tokens.numpy(), full.tokens.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), full.scores.numpy(), atol=1e-4)


def test_each_sentence_in_a_batch_gets_what_it_gets_alone(search_model, search_sources):
    batch = beam_search(search_model, search_sources, max_output_extra=EXTRA)
    for row in range(len(search_sources)):
        length = int((search_sources[row] != PAD_ID).sum())
        alone = beam_search(search_model, search_sources[row:row + 1, :length],
                            max_output_extra=EXTRA)
        assert strip(alone.tokens.numpy()[0, 0]) == strip(batch.tokens.numpy()[row, 0])


def test_output_respects_max_length_and_never_emits_pad_or_bos(search_model, search_sources):
    result = greedy_search(search_model, search_sources, max_output_extra=2)
    for row in range(len(search_sources)):
        tokens = strip(result.tokens.numpy()[row, 0])
        assert tokens[-1] == EOS_ID
        assert len(tokens) <= int((search_sources[row] != PAD_ID).sum()) + 2
        assert PAD_ID not in tokens and BOS_ID not in tokens


def test_one_trace_serves_every_batch_size_and_length(search_model, search_sources):
    translate = tf.function(lambda ids: beam_search(search_model, ids, max_output_extra=EXTRA),
                            input_signature=[tf.TensorSpec([None, None], tf.int32)])
    first = translate(search_sources)
    second = translate(search_sources[1:3, :6])
    assert translate.experimental_get_tracing_count() == 1
    np.testing.assert_array_equal(first.tokens.numpy()[1:3, :, :second.tokens.shape[2]],
                                  second.tokens.numpy())


def test_n_best_must_fit_the_beam(search_model, search_sources):
    with pytest.raises(ValueError, match="n_best"):
        beam_search(search_model, search_sources, beam_size=2, n_best=3)

"""The keras.ops searches of tfformer.decode.keras_search (dev BLEU and evaluation off TensorFlow)
and the fixed-capacity decoder cache they use, on every backend: against decoding by full
recomputation (no cache, no search code: tests/reference_search.py), and on TensorFlow against
the in-graph search, token for token. Under JAX a search is one compiled program per shape that
takes the model's current weights."""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decode.keras_search import beam_search, greedy_search, sample_search
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


def test_sampling_with_top_k_1_is_greedy_search(search_model, search_sources):
    tokens, scores = greedy_search(search_model, search_sources, EXTRA)
    sampled, sampled_scores = sample_search(search_model, search_sources, 0.8, 1, 0.9,
                                            [5, 6, 7, 8], EXTRA)
    np.testing.assert_array_equal(sampled, tokens)
    np.testing.assert_allclose(sampled_scores, scores, atol=1e-5)


def test_a_seed_gives_one_sample_on_every_backend(search_model, search_sources):
    sources = np.repeat(search_sources[:1], 6, axis=0)
    first, scores = sample_search(search_model, sources, 1.0, 0, 1.0, np.arange(6), EXTRA)
    again, _ = sample_search(search_model, sources, 1.0, 0, 1.0, np.arange(6), EXTRA)
    np.testing.assert_array_equal(first, again)
    assert len({tuple(row) for row in first}) > 2
    # each sample's score is the model's log P(Y) of it, by a full forward pass
    for row, score in zip(first, scores):
        length = list(row).index(EOS_ID) + 1
        target = np.array([[BOS_ID, *row[:length]]], "int32")
        logits = ops.convert_to_numpy(search_model((sources[:1], target)))[0, :length]
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        log_probs[:, [PAD_ID, BOS_ID]] = -np.inf  # never generated: not renormalized, as searched
        assert score == pytest.approx(log_probs[np.arange(length), row[:length]].sum(), abs=1e-4)


def test_sampling_takes_a_prefix_and_the_repetition_guard_on_every_backend(search_model,
                                                                           search_sources):
    prefixes = np.array([[7, 9], [11, PAD_ID], [PAD_ID, PAD_ID], [5, 5]], "int32")
    tokens, scores = greedy_search(search_model, search_sources, EXTRA, no_repeat_ngram=2,
                                   prefix_ids=prefixes)
    sampled, sampled_scores = sample_search(search_model, search_sources, 0.8, 1, 1.0, 3, EXTRA,
                                            no_repeat_ngram=2, prefix_ids=prefixes)
    np.testing.assert_array_equal(sampled, tokens)  # top_k 1 is greedy, rules and all
    np.testing.assert_allclose(sampled_scores, scores, atol=1e-5)
    sources = np.repeat(search_sources, 4, axis=0)
    prefixes = np.repeat(prefixes, 4, axis=0)
    sampled, _ = sample_search(search_model, sources, 1.5, 0, 1.0, np.arange(16), EXTRA,
                               no_repeat_ngram=2, prefix_ids=prefixes)
    assert len({tuple(row) for row in sampled}) > 8
    for row, prefix in zip(sampled, prefixes):
        forced = [int(t) for t in prefix if t != PAD_ID]
        generated = [int(t) for t in row if t != PAD_ID]
        assert generated[:len(forced)] == forced
        bigrams = list(zip(generated, generated[1:]))
        assert len(bigrams) == len(set(bigrams)), generated


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the in-graph search is TensorFlow's")
def test_sampling_equals_the_in_graph_sampling(search_model, search_sources):
    from tfformer.decode.search import sample_search as graph_sample_search

    sources = np.repeat(search_sources, 4, axis=0)
    settings = (np.tile([1.0, 0.7, 1.3, 1.0], 4).astype("float32"),
                np.tile([0, 5, 0, 3], 4).astype("int32"),
                np.tile([1.0, 1.0, 0.8, 0.9], 4).astype("float32"), np.arange(16) * 7)
    tokens, scores = sample_search(search_model, sources, *settings, EXTRA)
    graph = graph_sample_search(search_model, sources, *settings, EXTRA)
    width = tokens.shape[1]
    np.testing.assert_array_equal(tokens, graph.tokens.numpy()[:, 0, :width])
    np.testing.assert_allclose(scores, graph.scores.numpy()[:, 0], atol=1e-5)


@pytest.mark.parametrize("k, alpha", [(4, 0.6), (2, 1.0)])
def test_beam_search_equals_the_numpy_reference_on_every_backend(search_model, search_sources,
                                                                  k, alpha):
    from tests.reference_search import reference_beam_search, strip

    tokens, scores = beam_search(search_model, search_sources, k, alpha, EXTRA, n_best=k)
    lengths = set()
    for row, source in enumerate(search_sources):
        expected = reference_beam_search(search_model, source, k, alpha, EXTRA)
        for rank, (sequence, score) in enumerate(expected):
            assert strip(tokens[row, rank]) == sequence, (row, rank)
            assert scores[row, rank] == pytest.approx(score, abs=1e-4)
            lengths.add(len(sequence))
    assert len(lengths) > 2  # hypotheses of several lengths: the test is not degenerate


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the in-graph search is TensorFlow's")
@pytest.mark.parametrize("k, alpha, n_best", [(4, 0.6, 4), (1, 0.0, 1), (3, 0.6, 2)])
def test_beam_search_is_token_identical_to_the_in_graph_search(search_model, search_sources,
                                                               k, alpha, n_best):
    from tfformer.decode.search import beam_search as graph_beam_search

    tokens, scores = beam_search(search_model, search_sources, k, alpha, EXTRA, n_best)
    graph = graph_beam_search(search_model, search_sources, k, alpha, EXTRA, n_best)
    graph_tokens = graph.tokens.numpy()
    width = max(tokens.shape[2], graph_tokens.shape[2])
    pad = lambda x: np.pad(x, [(0, 0), (0, 0), (0, width - x.shape[2])])  # noqa: E731
    np.testing.assert_array_equal(pad(tokens), pad(graph_tokens))
    np.testing.assert_allclose(scores, graph.scores.numpy(), atol=1e-5)


def test_beam_of_one_without_length_penalty_is_greedy_search(search_model, search_sources):
    tokens, scores = greedy_search(search_model, search_sources, EXTRA)
    beam_tokens, beam_scores = beam_search(search_model, search_sources, 1, 0.0, EXTRA)
    np.testing.assert_array_equal(beam_tokens[:, 0, :tokens.shape[1]], tokens)
    np.testing.assert_allclose(beam_scores[:, 0], scores, atol=1e-5)


PREFIXES = [[5, 6, 7], [], [9], [12, 12, 4, 20]]


def prefix_array(prefixes):
    prefix_ids = np.zeros([len(prefixes), max(map(len, prefixes))], "int32")
    for row, prefix in enumerate(prefixes):
        prefix_ids[row, :len(prefix)] = prefix
    return prefix_ids


def search_with_options(model, sources, k, extra, **options):
    """Greedy for k = 1 (as [batch, 1, T]), else beam search with alpha 0.6, all k best."""
    if k == 1:
        tokens, scores = greedy_search(model, sources, extra, **options)
        return tokens[:, None], scores[:, None]
    return beam_search(model, sources, k, 0.6, extra, n_best=k, **options)


@pytest.mark.parametrize("k", [1, 3])
def test_no_repeat_ngram_and_a_prefix_equal_the_numpy_reference(search_model, search_sources, k):
    from tests.reference_search import reference_beam_search, strip

    extra = 10  # long hypotheses of a 26-token vocabulary: repeats without the rule
    tokens, scores = search_with_options(search_model, search_sources, k, extra,
                                         no_repeat_ngram=2, prefix_ids=prefix_array(PREFIXES))
    for row, prefix in enumerate(PREFIXES):
        expected = reference_beam_search(search_model, search_sources[row], k,
                                         0.0 if k == 1 else 0.6, extra, no_repeat_ngram=2,
                                         prefix=prefix)
        assert len(expected) == k
        for rank, (sequence, score) in enumerate(expected):
            got = strip(tokens[row, rank])
            assert got[:len(prefix)] == prefix and got == sequence, (row, rank)
            assert scores[row, rank] == pytest.approx(score, abs=1e-4)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the in-graph search is TensorFlow's")
@pytest.mark.parametrize("k, n", [(1, 1), (1, 3), (4, 2), (2, 3)])
def test_options_are_token_identical_to_the_in_graph_search(search_model, search_sources, k, n):
    from tfformer.decode import search

    prefix_ids = prefix_array(PREFIXES)
    tokens, scores = search_with_options(search_model, search_sources, k, 12,
                                         no_repeat_ngram=n, prefix_ids=prefix_ids)
    graph = (search.greedy_search(search_model, search_sources, 12, no_repeat_ngram=n,
                                  prefix_ids=prefix_ids) if k == 1 else
             search.beam_search(search_model, search_sources, k, 0.6, 12, n_best=k,
                                no_repeat_ngram=n, prefix_ids=prefix_ids))
    np.testing.assert_array_equal(tokens, graph.tokens.numpy())
    np.testing.assert_allclose(scores, graph.scores.numpy(), atol=1e-5)


def test_a_search_takes_the_current_weights_and_compiles_once_per_shape(search_sources):
    """Dev BLEU searches a model between updates: a compiled search must not keep the weights
    it was first traced with. Under JAX one program serves every call of a shape."""
    from tfformer import Transformer, TransformerConfig
    from tfformer.decode import keras_search

    keras.utils.set_random_seed(11)
    model = Transformer(TransformerConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32,
                                          num_encoder_layers=1, num_decoder_layers=1,
                                          dropout=0.0))
    model.build()
    before, _ = greedy_search(model, search_sources, EXTRA)
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.5, w.shape).astype(w.dtype)
                       for w in model.get_weights()])
    after, scores = greedy_search(model, search_sources, EXTRA)
    assert not np.array_equal(before, after)
    for row, source in enumerate(search_sources):
        expected, score = reference_greedy(model, source, EXTRA)
        assert [int(t) for t in after[row] if t != PAD_ID] == expected, row
        np.testing.assert_allclose(scores[row], score, atol=1e-4)
    if keras.backend.backend() == "jax":
        (compiled,) = keras_search._COMPILED[model].values()
        assert compiled._cache_size() == 1  # two calls, one shape: compiled once
        # Three sentences of 12 positions are padded to four of 16: the same program, and
        # each sentence's search unchanged.
        three, three_scores = greedy_search(model, np.pad(search_sources[:3], [(0, 0), (0, 4)]),
                                            EXTRA)
        assert compiled._cache_size() == 1
        for row in range(3):
            assert list(three[row][three[row] != PAD_ID]) == list(after[row][after[row] != PAD_ID])
        np.testing.assert_allclose(three_scores, scores[:3], atol=1e-5)
        greedy_search(model, search_sources[:2], EXTRA)
        assert compiled._cache_size() == 2


def test_a_compiled_search_keeps_no_model_alive(search_sources):
    import gc
    import weakref

    from tfformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32,
                                          num_encoder_layers=1, num_decoder_layers=1))
    model.build()
    greedy_search(model, search_sources[:2], 2)
    collected = weakref.ref(model)
    del model
    gc.collect()
    assert collected() is None


def test_alpha_is_the_former_name_of_length_penalty(search_model, search_sources):
    with pytest.warns(DeprecationWarning, match="length_penalty="):
        _, old = beam_search(search_model, search_sources, 2, alpha=1.0, max_output_extra=EXTRA)
    _, new = beam_search(search_model, search_sources, 2, length_penalty=1.0,
                         max_output_extra=EXTRA)
    _, default = beam_search(search_model, search_sources, 2, max_output_extra=EXTRA)
    np.testing.assert_array_equal(old, new)
    assert not np.allclose(old, default)  # 1.0 is not the default's 0.6: the value was taken

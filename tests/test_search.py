"""Graph greedy/beam search against a plain NumPy beam search and against each other."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tests.reference_search import next_log_probs, reference_beam_search, strip
from tfformer.decode import sampling
from tfformer.decode.search import beam_search, greedy_search, sample_search
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

EXTRA = 6


@pytest.mark.parametrize("k, alpha", [(4, 0.6), (3, 0.0), (2, 1.0)])
def test_graph_beam_search_equals_numpy_reference(search_model, search_sources, k, alpha):
    result = beam_search(search_model, search_sources, beam_size=k, length_penalty=alpha,
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
    beam = beam_search(search_model, search_sources, beam_size=1, length_penalty=0.0,
                       max_output_extra=EXTRA)
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


def test_a_search_called_eagerly_runs_one_graph_traced_once_per_model_and_options(
        search_model, search_sources):
    from tfformer.decode import search as search_module

    in_graph = tf.function(lambda ids: beam_search(search_model, ids, 3, 0.6, EXTRA, n_best=3))
    expected = in_graph(search_sources)
    shapes = [search_sources, search_sources[1:3, :6], search_sources[:1], search_sources]
    results = [beam_search(search_model, ids, 3, 0.6, EXTRA, n_best=3) for ids in shapes]
    # The same tokens and scores as the search built into a caller's graph: the numbers of the
    # export, not of the ops run one by one.
    np.testing.assert_array_equal(results[0].tokens.numpy(), expected.tokens.numpy())
    np.testing.assert_array_equal(results[0].scores.numpy(), expected.scores.numpy())
    np.testing.assert_array_equal(results[3].tokens.numpy(), expected.tokens.numpy())
    def traced(**options):
        return [function for (search, model_id, static, _), (_, function)
                in search_module._TRACED.items()
                if search is search_module._beam_search and model_id == id(search_model)
                and dict(static) | options == dict(static)]

    [function] = traced(beam_size=3, length_penalty=0.6, max_output_extra=EXTRA, n_best=3)
    # The first shape, then one that takes any: four calls of three shapes, two traces.
    assert function.experimental_get_tracing_count() == 2
    beam_search(search_model, search_sources, 2, 0.3, EXTRA)  # other options: their own graph
    [other] = traced(beam_size=2, length_penalty=0.3, max_output_extra=EXTRA, n_best=1)
    assert other is not function and other.experimental_get_tracing_count() == 1


def test_a_search_called_eagerly_reads_the_weights_the_model_has_now(search_model,
                                                                       search_sources):
    import keras

    from tfformer import Transformer

    model = Transformer.from_config(search_model.get_config())
    model.build()
    model.set_weights(search_model.get_weights())
    before = greedy_search(model, search_sources, max_output_extra=EXTRA)
    table = keras.ops.convert_to_numpy(model.embedding.embeddings)
    model.embedding.embeddings.assign(table[::-1].copy())  # another model, the same variables
    after = greedy_search(model, search_sources, max_output_extra=EXTRA)
    expected = tf.function(lambda ids: greedy_search(model, ids, max_output_extra=EXTRA))(
        search_sources)
    assert not np.array_equal(after.scores.numpy(), before.scores.numpy())
    np.testing.assert_array_equal(after.tokens.numpy(), expected.tokens.numpy())
    np.testing.assert_array_equal(after.scores.numpy(), expected.scores.numpy())


def test_the_eager_search_cache_keeps_no_model_alive(search_sources):
    import gc
    import weakref

    from tfformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32,
                                          num_encoder_layers=1, num_decoder_layers=1))
    model.build()
    greedy_search(model, search_sources, max_output_extra=2)
    collected = weakref.ref(model)
    del model
    gc.collect()
    assert collected() is None


def test_run_functions_eagerly_runs_the_search_op_by_op_with_the_same_tokens(
        search_model, search_sources):
    graph = greedy_search(search_model, search_sources, max_output_extra=EXTRA)
    tf.config.run_functions_eagerly(True)
    try:
        eager = greedy_search(search_model, search_sources, max_output_extra=EXTRA)
    finally:
        tf.config.run_functions_eagerly(False)
    np.testing.assert_array_equal(eager.tokens.numpy(), graph.tokens.numpy())
    np.testing.assert_allclose(eager.scores.numpy(), graph.scores.numpy(), atol=1e-4)


def _loop_matmuls(graph_def) -> list:
    """The MatMul nodes of every while loop's body in a traced function's library."""
    bodies = {node.attr["body"].func.name for function in graph_def.library.function
              for node in function.node_def if node.op in ("While", "StatelessWhile")}
    bodies |= {node.attr["body"].func.name for node in graph_def.node
               if node.op in ("While", "StatelessWhile")}
    return [node for function in graph_def.library.function
            if function.signature.name in bodies
            for node in function.node_def if node.op == "MatMul"]


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_no_step_multiplies_by_a_transposed_table(search_model, search_sources, search):
    # TensorFlow's CPU MatMul without oneDNN multiplies a few rows by a transposed [vocab, d]
    # table far slower than by E^T laid out [d, vocab]: the loop gets the table transposed once.
    run = {"greedy": lambda ids: greedy_search(search_model, ids, max_output_extra=EXTRA),
           "beam": lambda ids: beam_search(search_model, ids, max_output_extra=EXTRA)}[search]
    traced = tf.function(run, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    matmuls = _loop_matmuls(traced.get_concrete_function().graph.as_graph_def())
    assert matmuls, "no MatMul found in the search loop"
    assert not [node.name for node in matmuls if node.attr["transpose_b"].b], \
        "a step multiplies by a transposed operand"


def test_n_best_must_fit_the_beam(search_model, search_sources):
    with pytest.raises(ValueError, match="n_best"):
        beam_search(search_model, search_sources, beam_size=2, n_best=3)


def repeated_ngrams(tokens, n):
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))


@pytest.mark.parametrize("k, n", [(1, 2), (4, 2), (3, 3), (2, 1)])
def test_no_repeat_ngram_equals_numpy_reference(search_model, search_sources, k, n):
    extra = 14  # long hypotheses of a 26-token vocabulary: repeats without the rule
    plain = greedy_search(search_model, search_sources, max_output_extra=extra)
    assert sum(repeated_ngrams(strip(row[0]), n) for row in plain.tokens.numpy()) > 0
    result = (greedy_search(search_model, search_sources, extra, no_repeat_ngram=n)
              if k == 1 else
              beam_search(search_model, search_sources, k, 0.6, extra, n_best=k,
                          no_repeat_ngram=n))
    for row in range(len(search_sources)):
        expected = reference_beam_search(search_model, search_sources[row], k,
                                         0.0 if k == 1 else 0.6, extra, no_repeat_ngram=n)
        for rank, (sequence, score) in enumerate(expected):
            got = strip(result.tokens.numpy()[row, rank])
            assert got == sequence, (row, rank)
            assert result.scores.numpy()[row, rank] == pytest.approx(score, abs=1e-4)
            assert repeated_ngrams(got[:-1], n) == 0


@pytest.mark.parametrize("k", [1, 4])
def test_forced_prefix_equals_numpy_reference(search_model, search_sources, k):
    prefixes = [[5, 6, 7], [], [9], [12, 12, 4, 20]]
    prefix_ids = np.zeros([4, 4], "int32")
    for row, prefix in enumerate(prefixes):
        prefix_ids[row, :len(prefix)] = prefix
    result = (greedy_search(search_model, search_sources, EXTRA, prefix_ids=prefix_ids)
              if k == 1 else
              beam_search(search_model, search_sources, k, 0.6, EXTRA, n_best=k,
                          prefix_ids=prefix_ids))
    for row, prefix in enumerate(prefixes):
        expected = reference_beam_search(search_model, search_sources[row], k,
                                         0.0 if k == 1 else 0.6, EXTRA, prefix=prefix)
        for rank, (sequence, score) in enumerate(expected):
            got = strip(result.tokens.numpy()[row, rank])
            assert got[:len(prefix)] == prefix
            assert got == sequence, (row, rank)
            assert result.scores.numpy()[row, rank] == pytest.approx(score, abs=1e-4)


def test_an_empty_prefix_is_the_search_without_one(search_model, search_sources):
    empty = np.zeros([4, 0], "int32")
    for search in (greedy_search, beam_search):
        with_prefix = search(search_model, search_sources, max_output_extra=EXTRA,
                             prefix_ids=empty)
        without = search(search_model, search_sources, max_output_extra=EXTRA)
        np.testing.assert_array_equal(with_prefix.tokens.numpy(), without.tokens.numpy())
        np.testing.assert_array_equal(with_prefix.scores.numpy(), without.scores.numpy())


def first_step_log_probs(model, source_row):
    step = next_log_probs(model, source_row, [[BOS_ID]])[0]
    step[[PAD_ID, BOS_ID]] = -np.inf
    return step - np.log(np.exp(step).sum())


def sample(model, sources, temperature=1.0, top_k=0, top_p=1.0, seeds=0, extra=EXTRA):
    batch = len(sources)
    return sample_search(model, sources, np.full([batch], temperature, "float32"),
                         np.full([batch], top_k, "int32"), np.full([batch], top_p, "float32"),
                         np.broadcast_to(np.asarray(seeds, "int64"), [batch]), extra)


def test_sampling_with_top_k_1_is_greedy_search(search_model, search_sources):
    greedy = greedy_search(search_model, search_sources, max_output_extra=EXTRA)
    sampled = sample(search_model, search_sources, temperature=0.7, top_k=1, seeds=[1, 2, 3, 4])
    np.testing.assert_array_equal(sampled.tokens.numpy(), greedy.tokens.numpy())
    np.testing.assert_allclose(sampled.scores.numpy(), greedy.scores.numpy(), atol=1e-5)


def test_a_seed_gives_one_sample_and_other_seeds_others(search_model, search_sources):
    sources = np.repeat(search_sources[:1], 8, axis=0)
    first = sample(search_model, sources, seeds=np.arange(8) + 100).tokens.numpy()
    again = sample(search_model, sources, seeds=np.arange(8) + 100).tokens.numpy()
    np.testing.assert_array_equal(first, again)
    assert len({tuple(strip(row[0])) for row in first}) > 2  # other seeds, other samples
    alone = sample(search_model, sources[3:4], seeds=[103]).tokens.numpy()  # not the batch's
    assert strip(alone[0, 0]) == strip(first[3, 0])


def chi_square_p_value(counts, probs):
    """P(X >= the statistic) for chi-square with cells pooled to >= 5 expected draws each, by
    the Wilson-Hilferty approximation (good to ~1e-3 relative at these sizes)."""
    expected = probs / probs.sum() * counts.sum()
    pooled = expected >= 5
    observed = counts[pooled]
    expected = expected[pooled]
    if (~pooled).any() and probs[~pooled].sum() > 0:
        observed = np.append(observed, counts[~pooled].sum())
        expected = np.append(expected, probs[~pooled].sum() / probs.sum() * counts.sum())
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = len(observed) - 1
    z = ((statistic / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_first_tokens_follow_the_models_distribution(search_model, search_sources):
    """Chi-square tests of 4000 first tokens, one seed each, against the model's softmax."""
    draws = 4000
    sources = np.repeat(search_sources[1:2], draws, axis=0)
    log_probs = first_step_log_probs(search_model, search_sources[1]).astype("float64")
    for temperature, offset in ((1.0, 0), (0.5, draws)):
        tokens = sample(search_model, sources, temperature, seeds=np.arange(draws) + offset,
                        extra=0).tokens.numpy()[:, 0, 0]
        counts = np.bincount(tokens, minlength=len(log_probs))
        assert counts[PAD_ID] == counts[BOS_ID] == 0
        probs = np.exp(log_probs / temperature)  # temperature 0.5: p^2, renormalized
        assert chi_square_p_value(counts, probs) > 1e-3, (counts, probs)
        uniform = np.where(np.isfinite(log_probs), 1.0, 0.0)  # the test can fail
        assert chi_square_p_value(counts, uniform) < 1e-6


@pytest.mark.parametrize("top_k, top_p", [(3, 1.0), (0, 0.5), (5, 0.3)])
def test_top_k_and_top_p_never_leave_their_set(search_model, search_sources, top_k, top_p):
    draws = 600
    sources = np.repeat(search_sources[2:3], draws, axis=0)
    tokens = sample(search_model, sources, top_k=top_k, top_p=top_p, seeds=np.arange(draws),
                    extra=0).tokens.numpy()[:, 0, 0]
    log_probs = first_step_log_probs(search_model, search_sources[2])
    order = np.argsort(-log_probs)
    probs = np.exp(log_probs[order])
    allowed = order[:top_k] if top_k else order
    nucleus = order[:int(np.searchsorted(np.cumsum(probs), top_p) + 1)]
    allowed = set(allowed) & set(nucleus)
    assert set(tokens) <= allowed
    assert len(set(tokens)) == len(allowed)  # every id of the set is drawn: not degenerate


def test_numpy_uniforms_are_the_graphs(search_model):
    seeds = np.array([0, 1, 2 ** 62, 7], "int64")
    graph = sampling.uniform(tf.constant(seeds), tf.constant(3), 50).numpy()
    np.testing.assert_array_equal(graph, sampling.uniform_np(seeds, 3, 50))
    assert graph.min() > 0 and graph.max() < 1
    assert abs(graph.mean() - 0.5) < 0.05

"""Scoring given translations (tfformer.decode.scoring), on every backend: against a NumPy
log-softmax of the model's teacher-forced pass, pair by pair and unpadded; against what the
searches say of their own outputs; and, on TensorFlow, the graph Translator's `score` against
the keras.ops one. CTranslate2's score_batch: tests/test_ctranslate2_export.py; the exported
signature: tests/test_export.py."""

import dataclasses

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decode import scoring
from tfformer.decode.keras_search import beam_search, greedy_search
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

EXTRA = 6


def reference_log_probs(model, source_row, target, leave_out_bos=False):
    """log P of each of `target`'s ids and of EOS after them: the model called on this one pair
    (no padding), log-softmax in float64 by NumPy."""
    source = source_row[source_row != PAD_ID][None].astype("int32")
    logits = ops.convert_to_numpy(model((source, np.array([[BOS_ID, *target]], "int32"))))
    logits = logits[0].astype(np.float64)
    if leave_out_bos:
        logits[:, BOS_ID] = -np.inf
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    labels = [*target, EOS_ID]
    return log_probs[np.arange(len(labels)), labels]


def random_targets(rows, lengths, seed=0):
    """int32 [rows, max length] of random ids (>= 4) of the given lengths, PAD after."""
    rng = np.random.default_rng(seed)
    targets = np.full([rows, max(lengths)], PAD_ID, np.int32)
    for row, length in enumerate(lengths):
        targets[row, :length] = rng.integers(4, 30, size=length)
    return targets


def test_token_log_probs_are_a_teacher_forced_numpy_pass_pair_by_pair(search_model,
                                                                      search_sources):
    lengths = [5, 0, 9, 2]  # an empty target too: its EOS alone is scored
    targets = random_targets(len(search_sources), lengths)
    token_scores, got_lengths = (ops.convert_to_numpy(x) for x in
                                 scoring.token_log_probs(search_model, search_sources, targets))
    assert token_scores.shape == (4, 10)
    np.testing.assert_array_equal(got_lengths, np.array(lengths) + 1)
    for row, length in enumerate(lengths):
        expected = reference_log_probs(search_model, search_sources[row], targets[row, :length])
        np.testing.assert_allclose(token_scores[row, :length + 1], expected, atol=1e-5)
        assert (token_scores[row, length + 1:] == 0).all()
    scores, normalized = (ops.convert_to_numpy(x) for x in
                          scoring.sequence_scores(token_scores, got_lengths))
    sums = [reference_log_probs(search_model, search_sources[r], targets[r, :n]).sum()
            for r, n in enumerate(lengths)]
    np.testing.assert_allclose(scores, sums, atol=1e-4)
    np.testing.assert_allclose(normalized, np.array(sums) / (np.array(lengths) + 1), atol=1e-5)


def test_an_imported_marian_model_leaves_bos_out_of_the_softmax(search_model, search_sources):
    from tfformer import Transformer

    config = dataclasses.replace(search_model.transformer_config, bos_in_softmax=False)
    model = Transformer(config)
    model.build()
    model.set_weights(search_model.get_weights())
    targets = random_targets(len(search_sources), [3, 1, 4, 2], seed=1)
    token_scores, _ = scoring.token_log_probs(model, search_sources, targets)
    with_bos, _ = scoring.token_log_probs(search_model, search_sources, targets)
    expected = reference_log_probs(model, search_sources[0], targets[0, :3], leave_out_bos=True)
    np.testing.assert_allclose(ops.convert_to_numpy(token_scores)[0, :4], expected, atol=1e-5)
    # BOS's probability mass, left out, raises every log-probability.
    assert (ops.convert_to_numpy(token_scores)[0, :4]
            > ops.convert_to_numpy(with_bos)[0, :4]).all()


def generated(tokens):
    """Search outputs (EOS-terminated, PAD after) as targets: the ids before EOS, PAD after."""
    targets = np.where(tokens == EOS_ID, PAD_ID, tokens)
    for row in range(len(tokens)):
        ends = np.flatnonzero(tokens[row] == EOS_ID)
        if len(ends):
            targets[row, ends[0]:] = PAD_ID
    return targets


def test_a_search_scores_what_it_generates(search_model, search_sources):
    """Greedy search's score is the log P of its output; beam search's, log P / lp(|Y|)."""
    tokens, scores = greedy_search(search_model, search_sources, EXTRA)
    token_scores, lengths = scoring.token_log_probs(search_model, search_sources,
                                                    generated(tokens))
    np.testing.assert_allclose(ops.convert_to_numpy(scoring.sequence_scores(
        token_scores, lengths)[0]), scores, atol=1e-4)
    tokens, scores = beam_search(search_model, search_sources, 4, 0.6, EXTRA, n_best=2)
    for best in range(2):
        token_scores, lengths = scoring.token_log_probs(search_model, search_sources,
                                                        generated(tokens[:, best]))
        sums = ops.convert_to_numpy(scoring.sequence_scores(token_scores, lengths)[0])
        penalty = ((5 + ops.convert_to_numpy(lengths)) / 6) ** 0.6
        np.testing.assert_allclose(sums / penalty, scores[:, best], atol=1e-4)


def small_model(vocab_size, positional="sinusoidal"):
    from tfformer import Transformer, TransformerConfig

    keras.utils.set_random_seed(5)
    model = Transformer(TransformerConfig(vocab_size=vocab_size, d_model=16, num_heads=2,
                                          d_ff=32, num_encoder_layers=1, num_decoder_layers=1,
                                          max_length=16, positional=positional))
    model.build()
    return model


@pytest.fixture(scope="module")
def pieces_and_model():
    """A SentencePiece vocabulary trained on the built-in corpus (no TensorFlow) and a random
    model of its size (max_length 16, sinusoids), and one with learned positions."""
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.pieces import SentencePieces, train_model

    pieces = SentencePieces(train_model([s for p in builtin_pairs("train", n=300) for s in p],
                                        120))
    return pieces, small_model(pieces.vocab_size), small_model(pieces.vocab_size, "learned")


def test_score_texts_scores_each_pair_and_refuses_what_it_cannot(pieces_and_model):
    pieces, model, learned = pieces_and_model
    sources = ["hola amigo", "el perro come", "", "hola"]
    # Sinusoids take any length, as the search's outputs may be: 20 pieces past max_length 16.
    targets = ["hello friend", "", "the dog eats apples", "a " * 20]
    assert len(pieces.encode([targets[-1]])[0]) > 16
    got = scoring.score_texts(model, pieces, sources, targets)
    for (score, normalized, token_scores), source, target in zip(got, sources, targets):
        ids = pieces.encode([target])[0]
        expected = reference_log_probs(model, pieces.encode_source([source])[0], ids)
        np.testing.assert_allclose(token_scores, expected, atol=1e-5)
        np.testing.assert_allclose([score, normalized], [expected.sum(), expected.mean()],
                                   atol=1e-5)
    assert scoring.score_texts(model, pieces, [], []) == []
    with pytest.raises(ValueError, match="2 sources for 1 targets"):
        scoring.score_texts(model, pieces, sources[:2], targets[:1])
    with pytest.raises(ValueError, match=r"target 1 is \d+ pieces long; the model scores at "
                                         r"most 15 \(its max_length - 1\)"):
        scoring.score_texts(learned, pieces, sources[:2], ["hola", "a " * 20])


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the graph Translator is TensorFlow's")
def test_the_graph_translators_score_is_the_keras_ops_one(pieces_and_model):
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.decode.translator import Translator

    pieces, model, learned = pieces_and_model
    translator = Translator(model, Tokenizer(pieces.model_proto))
    sources = ["hola amigo", "", "el perro come", "hola"]
    targets = ["hello", "the dog eats", "", "a " * 20]
    got = translator.score_texts(sources, targets)
    expected = scoring.score_texts(model, pieces, sources, targets)
    for (score, normalized, tokens), (want, want_normalized, want_tokens) in zip(got, expected):
        np.testing.assert_allclose([score, normalized], [want, want_normalized], atol=1e-5)
        np.testing.assert_allclose(tokens, want_tokens, atol=1e-5)
    assert translator.score_texts([], []) == []
    with pytest.raises(ValueError, match="1 sources for 2 targets"):
        translator.score_texts(sources[:1], targets[:2])
    import tensorflow as tf

    from tfformer.export.saved_model import scoreable

    bounded = Translator(learned, Tokenizer(pieces.model_proto))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"score: targets must each be at most 15 pieces long"):
        bounded.score_texts(sources, targets)
    # The export's check scores its translations cut to whole words within that limit.
    texts = ["a " * 20 + "b", "the dog eats", "x" * 40]
    assert scoreable(translator, texts) == texts
    cut = scoreable(bounded, texts)
    assert cut[1] == texts[1] and cut[2] == "" and texts[0].startswith(cut[0])
    assert 10 <= len(pieces.encode([cut[0]])[0]) <= 15 < len(pieces.encode([cut[0] + " a"])[0])
    assert [len(tokens) for _, _, tokens in bounded.score_texts(["hola"] * 3, cut)] == [
        len(pieces.encode([text])[0]) + 1 for text in cut]

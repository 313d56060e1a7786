"""Word alignments from the cross-attention (tfformer.decode.alignments), against NumPy: the
last decoder layer's weights averaged over heads, argmax over the source's pieces."""

import keras
import numpy as np
import pytest

from tfformer import Transformer, TransformerConfig
from tfformer.decode.alignments import NO_ALIGNMENT, alignment_indices, parse_pharaoh
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def reference(model, source_ids, tokens) -> np.ndarray:
    """The alignment of each row, computed one sentence at a time without padding."""
    expected = np.full(tokens.shape, NO_ALIGNMENT, "int32")
    for row in range(len(tokens)):
        source = source_ids[row][source_ids[row] != PAD_ID]
        target = list(tokens[row])
        end = target.index(EOS_ID) if EOS_ID in target else len(target)
        target_in = np.array([[BOS_ID, *target[:end]]], "int32")
        weights = model.attention_weights(source[None], target_in)["decoder_cross"]
        last = keras.ops.convert_to_numpy(weights[-1])[0].mean(axis=0)  # [T, S]
        if len(source) > 1:
            expected[row, :end] = last[:end, :len(source) - 1].argmax(axis=-1)
    return expected


def test_alignment_indices_equal_a_per_sentence_numpy_argmax():
    keras.utils.set_random_seed(5)
    model = Transformer(TransformerConfig(vocab_size=30, d_model=32, num_heads=4, d_ff=64,
                                          num_encoder_layers=2, num_decoder_layers=3,
                                          dropout=0.0))
    model.build()
    rng = np.random.default_rng(2)
    source_ids = rng.integers(4, 30, size=(4, 7)).astype("int32")
    tokens = rng.integers(4, 30, size=(4, 6)).astype("int32")
    for row, (source_length, target_length) in enumerate([(7, 6), (3, 2), (1, 4), (5, 1)]):
        source_ids[row, source_length - 1] = EOS_ID  # row 2: a source of EOS alone
        source_ids[row, source_length:] = PAD_ID
        tokens[row, target_length - 1] = EOS_ID  # row 3: a translation of EOS alone
        tokens[row, target_length:] = PAD_ID
    got = keras.ops.convert_to_numpy(alignment_indices(model, source_ids, tokens))
    np.testing.assert_array_equal(got, reference(model, source_ids, tokens))
    assert (got[2] == NO_ALIGNMENT).all() and (got[3] == NO_ALIGNMENT).all()
    assert (got[0, :5] >= 0).all() and (got[0, :5] < 6).all() and got[0, 5] == NO_ALIGNMENT


def test_pharaoh_writes_one_pair_per_aligned_target_piece():
    tf = pytest.importorskip("tensorflow")
    from tfformer.decode.alignments import pharaoh

    indices = np.array([[2, 0, 1, NO_ALIGNMENT], [NO_ALIGNMENT] * 4, [0, 0, 0, 3]], "int32")
    texts = [t.decode() for t in pharaoh(tf.constant(indices)).numpy()]
    assert texts == ["2-0 0-1 1-2", "", "0-0 0-1 0-2 3-3"]
    assert parse_pharaoh(texts[0]) == [(2, 0), (0, 1), (1, 2)] and parse_pharaoh("") == []
    assert pharaoh(tf.zeros([0, 0], tf.int32)).shape == [0]


def test_keras_translator_gives_each_translation_the_alignment_of_its_tokens():
    """KerasTranslator.translate_texts_aligned (the keras.ops search, compiled under JAX): the
    translations and scores of translate_texts, with the reference alignment of the searched
    tokens; where TensorFlow runs the model, what the export's translate_align gives."""
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.pieces import SentencePieces, train_model
    from tfformer.decode import keras_search
    from tfformer.decode.alignments import pharaoh_text
    from tfformer.decode.keras_translator import KerasTranslator
    from tfformer.utils.backends import on_tensorflow

    pieces = SentencePieces(train_model(
        [text for pair in builtin_pairs("train", 300) for text in pair], 120))
    keras.utils.set_random_seed(3)
    model = Transformer(TransformerConfig(vocab_size=pieces.vocab_size, d_model=32, num_heads=4,
                                          d_ff=64, num_encoder_layers=1, num_decoder_layers=2,
                                          dropout=0.0))
    model.build()
    translator = KerasTranslator(model, pieces, beam_size=2, max_output_extra=6)
    sentences = ["Los perros rojos comen.", "", "Hola."]
    got = translator.translate_texts_aligned(sentences)
    assert [(text, score) for text, score, _ in got] == translator.translate_texts(sentences)
    source_ids = pieces.encode_source(sentences)
    tokens, _ = keras_search.beam_search(model, source_ids, 2, 0.6, 6)
    tokens = keras.ops.convert_to_numpy(tokens)[:, 0]
    want = [pharaoh_text(row) for row in reference(model, source_ids, tokens)]
    assert [alignment for _, _, alignment in got] == want and want[1] == ""
    if on_tensorflow():
        from tfformer.data.tokenizer import Tokenizer
        from tfformer.decode.translator import Translator

        graph = Translator(model, Tokenizer(pieces.model_proto), beam_size=2,
                           max_output_extra=6).translate_texts_aligned(sentences)
        assert [(t, a) for t, _, a in graph] == [(t, a) for t, _, a in got]
        np.testing.assert_allclose([s for _, s, _ in graph], [s for _, s, _ in got], atol=1e-4)

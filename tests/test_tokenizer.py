"""Tests of tfformer.data.tokenizer: reserved ids, round trip, persistence, graph mode."""

import os

import pytest
import tensorflow as tf

from tfformer.data.builtin import builtin_pairs
from tfformer.data.tokenizer import Tokenizer
from tfformer.special_tokens import (
    BOS_ID,
    BOS_PIECE,
    EOS_ID,
    EOS_PIECE,
    NUM_RESERVED,
    PAD_ID,
    PAD_PIECE,
    UNK_ID,
    UNK_PIECE,
)

# Accents, ñ, ü, inverted marks, curly quotes, dashes: all must survive a round trip.
ACCENTED = [
    "¿Dónde está la pingüina? ¡Qué acción tan rápida!",
    "El niño comió ñoquis con su cigüeña, “dijo él”.",
    "«Árbol», ‘énfasis’ — Íñigo y Úrsula leían un libro único.",
    "Él pidió perdón: “Lo siento mucho”, y ella sonrió.",
    "She said “hello” and he’s sure it’s fine — isn’t it?",
    "Über café, naïve façade, jalapeño; résumé ¡sí!",
    "Mañana, el señor Muñoz irá a Cádiz o a Ávila.",
]


@pytest.fixture(scope="module")
def corpus():
    pairs = builtin_pairs("train", 1500, seed=0)
    return [side for pair in pairs for side in pair] + ACCENTED * 3


@pytest.fixture(scope="module")
def tokenizer(corpus):
    # Module scope, not session: another test module that re-seeds TF would destroy the
    # tf-text resource of a tokenizer created before it (see the tokenizer module docstring).
    return Tokenizer.train(corpus, 400, seed=0)


def test_reserved_ids_are_the_special_tokens(tokenizer):
    assert [tokenizer.id_to_piece(i) for i in range(NUM_RESERVED)] == [
        PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE]
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert isinstance(tokenizer.vocab_size, int) and tokenizer.vocab_size == 400
    assert int(tokenizer.sentencepiece.vocab_size()) == tokenizer.vocab_size
    ids = tokenizer.tokenize(tf.constant(ACCENTED)).flat_values.numpy()
    # tokenize adds no BOS/EOS/PAD, and every character of ACCENTED is known (no UNK).
    assert ids.min() >= NUM_RESERVED and ids.max() < tokenizer.vocab_size


def test_round_trip_equals_normalized_text(tokenizer):
    texts = ACCENTED + ["Los tres perros rojos comen manzanas verdes.",
                        "Una cigüeña única leía “cuentos” al niño.",  # unseen word combination
                        "  espacios    de más  "]
    restored = tokenizer.detokenize(tokenizer.tokenize(tf.constant(texts))).numpy()
    assert [r.decode("utf-8") for r in restored] == [tokenizer.normalize(t) for t in texts]
    # normalize() keeps accents and quotes (the round trip above is not trivially lossy) ...
    assert [tokenizer.normalize(t) for t in ACCENTED] == ACCENTED
    # ... and applies SentencePiece's whitespace normalization.
    assert tokenizer.normalize("  espacios    de más  ") == "espacios de más"


# The shared corpus beside the checkout (CI clones next to shared/ as well).
BIBLE_TRAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                           "shared", "data", "bible-es-en", "train.tsv")


def test_round_trip_on_real_text():
    if not os.path.exists(BIBLE_TRAIN):
        if os.environ.get("CI"):
            pytest.fail(f"{BIBLE_TRAIN} missing: CI clones beside shared/")
        pytest.skip(f"{BIBLE_TRAIN} not present (the shared corpus beside the checkout)")
    with open(BIBLE_TRAIN, encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(200)]
    sentences = [side for line in lines for side in line.split("\t")]
    tokenizer = Tokenizer.train(sentences, 600)
    restored = tokenizer.detokenize(tokenizer.tokenize(tf.constant(sentences[:50]))).numpy()
    assert [r.decode("utf-8") for r in restored] == [tokenizer.normalize(s) for s in sentences[:50]]


def _sentencepiece_on_sentences(sentences, vocab_size, max_sentence_length=4192):
    """The reference: SentencePiece's own BPE trainer on the sentences themselves."""
    import io

    import sentencepiece as spm

    spm.set_random_generator_seed(0)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([" ".join(s.split()) for s in sentences]), model_writer=model,
        vocab_size=vocab_size, model_type="bpe", character_coverage=1.0,
        hard_vocab_limit=False, max_sentence_length=max_sentence_length, pad_id=PAD_ID,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, pad_piece=PAD_PIECE, unk_piece=UNK_PIECE,
        bos_piece=BOS_PIECE, eos_piece=EOS_PIECE, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def _pieces_and_scores(processor):
    return [(processor.id_to_piece(i), processor.get_score(i))
            for i in range(processor.get_piece_size())]


def test_bpe_from_word_counts_is_sentencepieces_bpe_on_the_sentences(corpus):
    # Tokenizer.train gives BPE word counts, not sentences (a fraction of the memory): the
    # vocabulary must be SentencePiece's own on the sentences, piece for piece, score for score.
    # A sentence over max_sentence_length bytes is skipped by both.
    too_long = " ".join(["palabralarguísima"] * 20)
    sentences = corpus + [too_long]
    ours = Tokenizer.train(sentences, 500, seed=0, max_sentence_length=300)
    reference = _sentencepiece_on_sentences(sentences, 500, max_sentence_length=300)
    assert _pieces_and_scores(ours._processor) == _pieces_and_scores(reference)
    assert "▁palabralarguísima" not in {ours.id_to_piece(i) for i in range(ours.vocab_size)}
    texts = ACCENTED + corpus[:40]
    assert ours.tokenize(tf.constant(texts)).to_list() == [reference.encode(t) for t in texts]


def test_save_and_from_file_give_identical_ids(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.model"
    tokenizer.save(path)
    loaded = Tokenizer.from_file(path)
    assert loaded.vocab_size == tokenizer.vocab_size
    assert loaded.model_proto == tokenizer.model_proto
    texts = tf.constant(ACCENTED + ["El perro come."])
    assert loaded.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()


def test_training_is_deterministic(corpus):
    first = Tokenizer.train(corpus[:1000], 300, seed=3)
    second = Tokenizer.train(corpus[:1000], 300, seed=3)
    assert first.model_proto == second.model_proto


def test_vocab_size_is_a_soft_limit(corpus):
    small = Tokenizer.train(corpus[:200], 20000)
    assert NUM_RESERVED < small.vocab_size < 20000  # smaller corpus, smaller vocabulary
    ids = small.tokenize(tf.constant(corpus[:50])).flat_values.numpy()
    assert ids.max() < small.vocab_size


def test_unigram_model_type(corpus):
    unigram = Tokenizer.train(corpus[:1000], 300, model_type="unigram")
    assert unigram.id_to_piece(EOS_ID) == EOS_PIECE
    text = corpus[0]
    restored = unigram.detokenize(unigram.tokenize([text])).numpy()[0].decode()
    assert restored == unigram.normalize(text)


def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="smaller than required_chars"):
        Tokenizer.train(["abcdefghijklmnopqrstuvwxyz áéíóú"] * 20, 10)
    with pytest.raises(ValueError, match="model_type"):
        Tokenizer.train(["hola"], 100, model_type="wordpiece")
    with pytest.raises(ValueError, match="no non-empty"):
        Tokenizer.train(["", "   "], 100)
    with pytest.raises(ValueError, match="not a valid SentencePiece model"):
        Tokenizer(b"not a model")


def test_foreign_reserved_ids_are_rejected():
    import io

    import sentencepiece as spm
    model = io.BytesIO()  # SentencePiece defaults: unk=0, bos=1, eos=2, no pad
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["hola mundo"] * 20),
                                   model_writer=model, vocab_size=12, hard_vocab_limit=False,
                                   minloglevel=2)
    with pytest.raises(ValueError, match="reserved ids"):
        Tokenizer(model.getvalue())


def test_tokenize_and_detokenize_in_tf_function_with_unknown_batch(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        ids = tokenizer.tokenize(strings)
        return ids.to_tensor(), tokenizer.detokenize(ids.to_tensor())

    for texts in (ACCENTED[:1], ACCENTED):
        dense, text = round_trip(tf.constant(texts))
        eager = tokenizer.tokenize(tf.constant(texts))
        assert dense.numpy().tolist() == eager.to_tensor().numpy().tolist()
        assert [t.decode() for t in text.numpy()] == [tokenizer.normalize(x) for x in texts]


def test_detokenize_stops_at_eos_and_drops_pad_and_bos(tokenizer):
    first, second = "El perro come manzanas.", "¿Dónde está la pingüina?"
    a, b = tokenizer.tokenize(tf.constant([first, second])).to_list()
    length = len(a) + len(b) + 4
    rows = [
        [BOS_ID] + a + [EOS_ID] + b + [PAD_ID] * (length - len(a) - len(b) - 2),
        b + [EOS_ID] + a + [EOS_ID] + [PAD_ID] * (length - len(a) - len(b) - 2),
        [EOS_ID] + a + [PAD_ID] * (length - len(a) - 1),
        [PAD_ID, BOS_ID] + a + [PAD_ID] * (length - len(a) - 2),  # no EOS: all of it
    ]
    expected = [tokenizer.normalize(first), tokenizer.normalize(second), "",
                tokenizer.normalize(first)]
    for ids in (tf.constant(rows, tf.int32), tf.constant(rows, tf.int64),
                tf.ragged.constant([r[:r.index(PAD_ID)] if r[0] != PAD_ID else r for r in rows])):
        assert [t.decode() for t in tokenizer.detokenize(ids).numpy()] == expected
    single = tokenizer.detokenize(tf.constant(rows[0]))
    assert single.shape == () and single.numpy().decode() == expected[0]

    detok = tf.function(tokenizer.detokenize,
                        input_signature=[tf.TensorSpec([None, None], tf.int32)])
    assert [t.decode() for t in detok(tf.constant(rows)).numpy()] == expected

"""Tests of tfformer.data.builtin: the synthetic corpus's splits, grammar and numbers."""

import pytest

from tfformer.data.builtin import builtin_pairs, grammar
from tfformer.data.builtin.grammar import NounPhrase, Sentence, render
from tfformer.data.builtin.vocabulary import number_to_english, number_to_spanish


def test_builtin_corpus_is_deterministic_and_seeded():
    first = builtin_pairs("train", 300, seed=0)
    assert builtin_pairs("train", 300, seed=0) == first
    assert builtin_pairs("train", 100, seed=0) == first[:100]  # n only truncates
    other = builtin_pairs("train", 300, seed=1)
    assert len(set(first) & set(other)) < 30  # a different seed, a different corpus


def test_builtin_splits_are_disjoint_and_sized():
    train = builtin_pairs("train")
    dev = builtin_pairs("dev")
    test = builtin_pairs("test", 200)
    assert (len(train), len(dev)) == (20000, 500)
    train_sources = {s for s, _ in train}
    assert not train_sources & {s for s, _ in dev}
    assert not train_sources & {s for s, _ in test}
    assert not {s for s, _ in dev} & {s for s, _ in test}
    # Sentence lengths and vocabulary: big enough to learn from, small enough to learn.
    lengths = [len(s.split()) for s, _ in train]
    assert min(lengths) >= grammar.MIN_WORDS and max(lengths) <= grammar.MAX_WORDS
    es_words = {w.strip(".").lower() for s, _ in train for w in s.split()}
    en_words = {w.strip(".").lower() for _, t in train for w in t.split()}
    assert 300 < len(es_words) < 2000 and 300 < len(en_words) < 2000


def test_builtin_reorders_adjectives_and_agrees():
    sentence = Sentence(
        subject=NounPhrase("perro", plural=True, count=3, adjectives=("rojo",)), verb="comer",
        obj=NounPhrase("manzana", plural=True, det="none", adjectives=("verde",)))
    assert render(sentence) == ("Los tres perros rojos comen manzanas verdes.",
                                "The three red dogs eat green apples.")
    # Gender agreement of number and adjective, personal "a" + contraction, do-support.
    sentence = Sentence(
        subject=NounPhrase("niña", det="this", adjectives=("pequeño",)), verb="ayudar",
        negated=True, obj=NounPhrase("hombre", possessor=NounPhrase("mujer", plural=True)),
        pp=("cerca de", NounPhrase("río")), time="hoy")
    assert render(sentence) == (
        "Esta niña pequeña no ayuda al hombre de las mujeres cerca del río hoy.",
        "This small girl does not help the women's man near the river today.")
    sentence = Sentence(subject="nosotras", drop_pronoun=True, verb="comprar",
                        obj=NounPhrase("manzana", plural=True, det="none", count=201,
                                       adjectives=("rojo", "grande")))
    assert render(sentence) == ("Compramos doscientas una manzanas rojas y grandes.",
                                "We buy two hundred one red and big apples.")
    sentence = Sentence(kind="exist", pp=("en", NounPhrase("jardín")),
                        obj=NounPhrase("elefante", det="indef", adjectives=("viejo",)))
    assert render(sentence) == ("Hay un elefante viejo en el jardín.",
                                "There is an old elephant in the garden.")


def test_numbers():
    assert number_to_spanish(342) == "trescientos cuarenta y dos"
    assert number_to_english(342) == "three hundred forty-two"
    assert number_to_spanish(21) == "veintiún"
    assert number_to_spanish(21, feminine=True) == "veintiuna"
    assert number_to_spanish(100) == "cien" and number_to_spanish(101) == "ciento un"
    assert number_to_spanish(515, feminine=True) == "quinientas quince"
    assert number_to_english(100) == "one hundred" and number_to_english(17) == "seventeen"
    assert number_to_english(90) == "ninety" and number_to_english(999) == (
        "nine hundred ninety-nine")
    with pytest.raises(ValueError):
        number_to_spanish(1000)


def test_generated_pairs_are_cached_on_disk_and_a_torn_cache_is_made_again(tmp_path,
                                                                           monkeypatch):
    import itertools
    import json

    monkeypatch.setenv("TFFORMER_CACHE_DIR", str(tmp_path))
    grammar._generated.cache_clear()
    made = list(itertools.islice(grammar.iter_pairs("dev", seed=3), 50))
    assert builtin_pairs("dev", 50, seed=3) == made
    [cached] = (tmp_path / "builtin").iterdir()
    assert [tuple(pair) for pair in json.loads(cached.read_text(encoding="utf-8"))] == made
    for torn in (cached.read_text(encoding="utf-8")[:100], "[]", '[["one"]]'):
        cached.write_text(torn, encoding="utf-8")
        grammar._generated.cache_clear()
        assert builtin_pairs("dev", 50, seed=3) == made  # made again, and the cache repaired
        assert [tuple(p) for p in json.loads(cached.read_text(encoding="utf-8"))] == made
    assert grammar._cache_path("dev", 51, 3) != str(cached)  # another count, another file
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("TFFORMER_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    grammar._generated.cache_clear()
    try:
        assert builtin_pairs("dev", 50, seed=3) == made  # nowhere to write: generated each time
    finally:
        grammar._generated.cache_clear()

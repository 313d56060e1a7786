"""The built-in corpus's grammar: sentence structures, their Spanish and English renderings,
their sampling, and the disjoint train / dev / test splits.

Sentences come from a small grammar over a lexicon of a few hundred words per language
(`tfformer.data.builtin.vocabulary`). The translation is a real transduction, not a
word-for-word substitution:

* adjectives follow the noun in Spanish and precede it in English
  ("los tres perros rojos" → "the three red dogs");
* Spanish articles, numbers ("doscientas manzanas", "veintiún perros"), adjectives and verbs agree
  in gender and number, English verbs agree only in the third person singular;
* numbers 2..999 are spelled out ("trescientos cuarenta y dos" → "three hundred forty-two");
* possessives move ("el perro de la niña" → "the girl's dog");
* Spanish drops subject pronouns ("Comemos manzanas." → "We eat apples.");
* negation needs do-support in English ("no come" → "does not eat");
* contractions (del, al), the personal "a", "a"/"an", "hay" → "there is/are".

Everything is generated from `random.Random` instances seeded from the caller's seed (never the
global random state), so a seed always gives the same corpus. Splits are disjoint by
construction: a stable hash of the Spanish sentence (salted with the seed) decides which split a
sentence may belong to, so no source sentence appears in two splits.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import random
import sys
from typing import Iterator

from tfformer.data.builtin.vocabulary import (
    ADJECTIVES,
    ADVERBS,
    ANIMAL,
    ANIMATE,
    BE_EN,
    COPULA_ES,
    DETERMINERS,
    FOOD,
    INTRANSITIVE,
    NOUNS,
    NOUNS_BY_CATEGORY,
    PERSON,
    PLACE,
    PREPOSITIONS,
    PRONOUNS,
    READABLE,
    THING,
    TIMES,
    TRANSITIVE,
    VERBS,
    Noun,
    number_to_english,
    number_to_spanish,
)
from tfformer.utils.checks import check_at_least

SPLIT_SIZES: dict[str, int] = {"train": 20000, "dev": 500, "test": 500}
"""Default number of pairs per split."""

MIN_WORDS = 5
MAX_WORDS = 20
"""Length range, in Spanish words, of generated sentences (others are re-drawn)."""

# A sentence belongs to split `_SPLIT_BUCKET[split]` of `_NUM_BUCKETS` hash buckets (train gets
# all the other buckets). 1/10 per held-out split keeps dev/test generation cheap.
_NUM_BUCKETS = 10
_SPLIT_BUCKET = {"dev": 0, "test": 1}

_DROPPABLE = {"yo", "tú", "nosotros", "nosotras"}  # 1st/2nd person: the verb form says who
_FREE_GENDER = {"yo", "tú"}  # their gender shows only in a predicate adjective

# ---------------------------------------------------------------------------------------------
# Sentence structures and their two renderings
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NounPhrase:
    """A noun phrase; `noun` and `adjectives` are Spanish lemmas (keys of NOUNS / ADJECTIVES).

    det is a key of DETERMINERS; count (2..999) needs plural=True; very needs one adjective;
    possessor ("de la niña" → "the girl's") needs det="def".
    """

    noun: str
    plural: bool = False
    det: str = "def"
    count: int | None = None
    adjectives: tuple[str, ...] = ()
    very: bool = False
    possessor: NounPhrase | None = None

    @property
    def entry(self) -> Noun:
        return NOUNS[self.noun]


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One clause. kind: "action" (needs verb), "copula" (needs adjective), "exist" ("hay").

    subject: a pronoun (key of PRONOUNS) or a NounPhrase; unused for "exist", whose NounPhrase
    is `obj`. adverb: key of ADVERBS; time: key of TIMES; pp: (preposition key, NounPhrase).
    """

    kind: str = "action"
    subject: str | NounPhrase | None = None
    verb: str | None = None
    obj: NounPhrase | None = None
    adjective: str | None = None
    very: bool = False
    negated: bool = False
    adverb: str | None = None
    pp: tuple[str, NounPhrase] | None = None
    time: str | None = None
    drop_pronoun: bool = False
    feminine: bool = False  # gender of "yo"/"tú" for a predicate adjective


def _gender_number_index(feminine: bool, plural: bool) -> int:
    return (2 if plural else 0) + (1 if feminine else 0)


def _es_noun_phrase(np: NounPhrase) -> list[str]:
    noun = np.entry
    index = _gender_number_index(noun.feminine, np.plural)
    words = [DETERMINERS[np.det][0][index]]
    if np.count is not None:
        words.append(number_to_spanish(np.count, noun.feminine))
    words.append(noun.es_plural if np.plural else noun.es)
    adjectives = [ADJECTIVES[a].forms[index] for a in np.adjectives]
    if np.very:
        words.append("muy")
    if adjectives:
        words.append(" y ".join(adjectives))  # adjectives FOLLOW the noun in Spanish
    if np.possessor is not None:
        words += ["de"] + _es_noun_phrase(np.possessor)
    return [w for w in words if w]


def _en_noun_phrase(np: NounPhrase) -> list[str]:
    noun = np.entry
    if np.possessor is not None:
        owner = _en_noun_phrase(np.possessor)
        # English genitive: "the girls'" after a plural in -s, else "'s" ("the men's").
        owner[-1] += "'" if np.possessor.plural and owner[-1].endswith("s") else "'s"
        words = owner
    else:
        words = [DETERMINERS[np.det][1][1 if np.plural else 0]]
    if np.count is not None:
        words.append(number_to_english(np.count))
    if np.very:
        words.append("very")
    if np.adjectives:
        words.append(" and ".join(ADJECTIVES[a].en for a in np.adjectives))  # BEFORE the noun
    words.append(noun.en_plural if np.plural else noun.en)
    words = [w for w in words if w]
    if np.det == "indef" and np.possessor is None:
        words[0] = "an" if words[1][0] in "aeiou" else "a"
    return words


def _subject_info(sentence: Sentence) -> tuple[int, bool, list[str], list[str]]:
    """(person index, feminine, Spanish words, English words) of the subject."""
    subject = sentence.subject
    if isinstance(subject, NounPhrase):
        return (4 if subject.plural else 2, subject.entry.feminine, _es_noun_phrase(subject),
                _en_noun_phrase(subject))
    if subject not in PRONOUNS:
        raise ValueError(f"unknown subject {subject!r}")
    person, feminine, english = PRONOUNS[subject]
    if subject in _FREE_GENDER:
        feminine = sentence.feminine
    spanish = [] if sentence.drop_pronoun and subject in _DROPPABLE else [subject]
    return person, feminine, spanish, [english]


def _contract(words: list[str]) -> list[str]:
    """Spanish contractions: de + el → del, a + el → al."""
    out: list[str] = []
    for word in " ".join(words).split():
        if word == "el" and out and out[-1] in ("de", "a"):
            out[-1] += "l"
        else:
            out.append(word)
    return out


def _finish(words: list[str]) -> str:
    text = " ".join(w for w in words if w)
    return text[0].upper() + text[1:] + "."


def render(sentence: Sentence) -> tuple[str, str]:
    """Returns the (Spanish, English) pair for `sentence`."""
    es: list[str] = []
    en: list[str] = []
    pre_adverb = [sentence.adverb] if sentence.adverb else []
    en_adverb = [ADVERBS[sentence.adverb]] if sentence.adverb else []
    if sentence.kind == "exist":
        np = sentence.obj
        if np is None:
            raise ValueError("an existential sentence needs obj")
        if sentence.negated:  # "No hay manzanas" → "There are no apples": bare plural only
            if not np.plural or np.det != "none" or np.count is not None:
                raise ValueError("a negated existential needs a bare plural noun phrase")
            es = ["no", "hay"] + _es_noun_phrase(np)
            en = ["there", "are", "no"] + _en_noun_phrase(np)
        else:
            es = ["hay"] + _es_noun_phrase(np)
            en = ["there", "are" if np.plural else "is"] + _en_noun_phrase(np)
    else:
        person, feminine, es_subject, en_subject = _subject_info(sentence)
        plural = person in (3, 4)
        negation = ["no"] if sentence.negated else []
        if sentence.kind == "copula":
            adjective = ADJECTIVES[sentence.adjective]
            very_es, very_en = (["muy"], ["very"]) if sentence.very else ([], [])
            es = (es_subject + negation + pre_adverb + [COPULA_ES[adjective.copula][person]]
                  + very_es + [adjective.forms[_gender_number_index(feminine, plural)]])
            # English adverbs and "not" follow "be": "is always tired", "is not tired".
            en = (en_subject + [BE_EN[person]] + (["not"] if sentence.negated else [])
                  + en_adverb + very_en + [adjective.en])
        elif sentence.kind == "action":
            verb = VERBS[sentence.verb]
            es = es_subject + negation + pre_adverb + [verb.es[person]]
            if sentence.negated:  # do-support: "does not eat"
                en = en_subject + ["does" if person == 2 else "do", "not"] + en_adverb + [verb.en]
            else:
                en = en_subject + en_adverb + [verb.en_3sg if person == 2 else verb.en]
            if sentence.obj is not None:
                if verb.objects is None:
                    raise ValueError(f"{sentence.verb!r} takes no object")
                # Personal "a" before a human direct object ("ayudo a la niña").
                es += (["a"] if sentence.obj.entry.category == PERSON else []) + _es_noun_phrase(
                    sentence.obj)
                en += _en_noun_phrase(sentence.obj)
        else:
            raise ValueError(f"unknown sentence kind {sentence.kind!r}")
    if sentence.pp is not None:
        preposition, np = sentence.pp
        es += [preposition] + _es_noun_phrase(np)
        en += [PREPOSITIONS[preposition][0]] + _en_noun_phrase(np)
    if sentence.time is not None:
        es.append(sentence.time)
        en.append(TIMES[sentence.time])
    return _finish(_contract(es)), _finish(en)


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


def _weighted(rng: random.Random, choices: dict[str, float]) -> str:
    return rng.choices(list(choices), weights=list(choices.values()))[0]


def _sample_count(rng: random.Random) -> int:
    # Mostly small numbers, but every magnitude occurs so that the number grammar is learnable.
    r = rng.random()
    if r < 0.55:
        return rng.randint(2, 12)
    if r < 0.8:
        return rng.randint(13, 99)
    return rng.randint(100, 999)


@functools.lru_cache(maxsize=None)
def _adjectives_for(category: str) -> tuple[str, ...]:
    return tuple(a for a, entry in ADJECTIVES.items()
                 if entry.categories is None or category in entry.categories)


@functools.lru_cache(maxsize=None)
def _nouns_in(categories: frozenset[str]) -> tuple[Noun, ...]:
    return tuple(n for c in sorted(categories) for n in NOUNS_BY_CATEGORY[c])


def _sample_adjectives(rng: random.Random, noun: Noun, max_count: int = 2) -> tuple[str, ...]:
    r = rng.random()
    k = 0 if r < 0.5 else 1 if r < 0.88 or max_count < 2 else 2
    return tuple(rng.sample(_adjectives_for(noun.category), k))


def _sample_noun_phrase(rng: random.Random, categories: frozenset[str], *, subject: bool = False,
                        possessor: bool = False, indefinite_ok: bool = True) -> NounPhrase:
    noun = rng.choice(_nouns_in(categories))
    if noun.mass:
        dets = {"def": 4, "this": 1, "that": 1, "my": 1, "our": 1}
        if not subject:
            dets["none"] = 4
        plural, count = False, None
    else:
        plural = rng.random() < 0.5
        count = _sample_count(rng) if plural and not possessor and rng.random() < 0.3 else None
        if count is not None:
            dets = {"def": 3, "none": 4, "this": 1, "that": 1, "my": 1, "our": 1}
        elif plural:
            # Spanish needs a determiner on preverbal plural subjects: no bare "perros" there.
            dets = {"def": 5, "some": 2, "this": 1, "that": 1, "my": 1, "our": 1}
            if not subject:
                dets["none"] = 4
        else:
            dets = {"def": 6, "indef": 3, "this": 1, "that": 1, "my": 1, "our": 1}
        if possessor or not indefinite_ok:
            dets.pop("indef", None)
            dets.pop("some", None)
    det = _weighted(rng, dets)
    adjectives = _sample_adjectives(rng, noun, 1 if possessor else 2)
    very = len(adjectives) == 1 and rng.random() < 0.15
    owner = None
    if det == "def" and not possessor and rng.random() < 0.12:
        owner = _sample_noun_phrase(rng, frozenset({PERSON}), possessor=True)
    return NounPhrase(noun.es, plural, det, count, adjectives, very, owner)


def _sample_pp(rng: random.Random) -> tuple[str, NounPhrase]:
    preposition = rng.choice(list(PREPOSITIONS))
    return preposition, _sample_noun_phrase(rng, PREPOSITIONS[preposition][1])


def sample_sentence(rng: random.Random) -> Sentence:
    """Draws one sentence structure from the grammar using only `rng`."""
    kind = _weighted(rng, {"action": 0.7, "copula": 0.15, "exist": 0.15})
    time = rng.choice(list(TIMES)) if rng.random() < 0.3 else None
    if kind == "exist":
        negated = rng.random() < 0.15
        if negated:
            noun = rng.choice([n for n in NOUNS.values() if n.category in (ANIMAL, FOOD, THING)
                               and not n.mass])
            np = NounPhrase(noun.es, True, "none", None, _sample_adjectives(rng, noun))
        else:
            np = _sample_noun_phrase(rng, frozenset({ANIMAL, PERSON, FOOD, THING, READABLE}))
            if np.det not in ("indef", "some", "none"):  # "hay" takes no definite article
                np = dataclasses.replace(np, det="indef" if not np.plural else "some",
                                         possessor=None)
                if np.count is not None or np.entry.mass:
                    np = dataclasses.replace(np, det="none")
        preposition = rng.choice([p for p, (_, cats) in PREPOSITIONS.items()
                                  if cats & {PLACE, THING}])
        pp = (preposition, _sample_noun_phrase(rng, PREPOSITIONS[preposition][1]))
        return Sentence(kind="exist", obj=np, negated=negated, pp=pp, time=time)

    if rng.random() < 0.35:
        subject: str | NounPhrase = rng.choice(list(PRONOUNS))
    else:
        subject = _sample_noun_phrase(rng, ANIMATE, subject=True)
    r = rng.random()
    negated, adverb = r < 0.15, None
    if 0.15 <= r < 0.3:
        adverb = rng.choice(list(ADVERBS))
    common = dict(subject=subject, negated=negated, adverb=adverb, time=time,
                  drop_pronoun=rng.random() < 0.7, feminine=rng.random() < 0.5)
    if kind == "copula":
        category = subject.entry.category if isinstance(subject, NounPhrase) else PERSON
        adjective = rng.choice(_adjectives_for(category))
        pp = _sample_pp(rng) if rng.random() < 0.2 else None
        return Sentence(kind="copula", adjective=adjective, very=rng.random() < 0.2, pp=pp,
                        **common)
    if rng.random() < 0.75:
        verb = rng.choice(TRANSITIVE)
        obj = _sample_noun_phrase(rng, VERBS[verb].objects)
        pp = _sample_pp(rng) if rng.random() < 0.3 else None
    else:
        verb, obj = rng.choice(INTRANSITIVE), None
        pp = _sample_pp(rng) if rng.random() < 0.7 else None
    return Sentence(kind="action", verb=verb, obj=obj, pp=pp, **common)


def _split_of(source: str, seed: int) -> str:
    # A stable hash (not Python's salted hash()) so that the split of a sentence never changes.
    digest = hashlib.blake2b(f"{seed}\t{source}".encode("utf-8"), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % _NUM_BUCKETS
    return next((s for s, b in _SPLIT_BUCKET.items() if b == bucket), "train")


def iter_pairs(split: str = "train", seed: int = 0) -> Iterator[tuple[str, str]]:
    """Yields (Spanish, English) pairs of `split` forever, deterministically for `seed`.

    The first n pairs are the same whatever n the caller stops at.
    """
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(SPLIT_SIZES)}")
    rng = random.Random(f"tfformer-builtin/{seed}/{split}")
    while True:
        source, target = render(sample_sentence(rng))
        if not MIN_WORDS <= len(source[:-1].split()) <= MAX_WORDS:
            continue
        if _split_of(source, seed) == split:
            yield source, target


def builtin_pairs(split: str = "train", n: int | None = None,
                  seed: int = 0) -> list[tuple[str, str]]:
    """Returns `n` synthetic (Spanish, English) pairs of `split`.

    Args:
        split: "train", "dev" or "test"; no Spanish sentence occurs in two splits.
        n: number of pairs; defaults to SPLIT_SIZES[split] (20000 / 500 / 500).
        seed: corpus seed; the same seed always gives the same pairs.

    Returns:
        a list of (source, target) strings. Pairs may repeat within a split (short sentences).
    """
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(SPLIT_SIZES)}")
    count = SPLIT_SIZES[split] if n is None else n
    check_at_least("n", n, 0)
    return list(_generated(split, count, seed))


@functools.lru_cache(maxsize=8)
def _generated(split: str, count: int, seed: int) -> tuple[tuple[str, str], ...]:
    # A run reads its training split twice (the scan, then the stream), and generating it is
    # slow pure Python (~2.5 s for the 20000 training pairs): once per process, and from the
    # disk cache when a process has made these pairs with this code before.
    path = _cache_path(split, count, seed)
    try:
        with open(path, encoding="utf-8") as f:
            cached = json.load(f)
        if len(cached) == count and all(len(pair) == 2 for pair in cached):
            return tuple((source, target) for source, target in cached)
    except (OSError, ValueError, TypeError):
        pass  # none yet, or unreadable: made again below
    pairs = iter_pairs(split, seed)
    generated = tuple(next(pairs) for _ in range(count))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"  # a process of its own: no torn file is read
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(generated, f, ensure_ascii=False)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: generate every time
    return generated


def _cache_path(split: str, count: int, seed: int) -> str:
    """Where the pairs are cached: keyed by the generator's code and the Python version (its
    `random` draws), $TFFORMER_CACHE_DIR or ~/.cache/tfformer."""
    root = os.environ.get("TFFORMER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfformer")
    key = hashlib.sha256(f"{sys.version_info[:2]}/{split}/{count}/{seed}".encode())
    for module in ("grammar.py", "vocabulary.py"):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), module), "rb") as f:
            key.update(f.read())
    return os.path.join(root, "builtin", f"{split}-{key.hexdigest()[:16]}.json")

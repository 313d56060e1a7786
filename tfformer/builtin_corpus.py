"""A built-in synthetic Spanish→English corpus that needs no download.

Sentences come from a small grammar with a lexicon of a few hundred words per language. The
translation is a real transduction, not a word-for-word substitution:

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
import random
from typing import Iterator

SPLIT_SIZES: dict[str, int] = {"train": 20000, "dev": 500, "test": 500}
"""Default number of pairs per split."""

MIN_WORDS = 5
MAX_WORDS = 20
"""Length range, in Spanish words, of generated sentences (others are re-drawn)."""

# A sentence belongs to split `_SPLIT_BUCKET[split]` of `_NUM_BUCKETS` hash buckets (train gets
# all the other buckets). 1/10 per held-out split keeps dev/test generation cheap.
_NUM_BUCKETS = 10
_SPLIT_BUCKET = {"dev": 0, "test": 1}

# ---------------------------------------------------------------------------------------------
# Lexicon
# ---------------------------------------------------------------------------------------------

PERSON, ANIMAL, FOOD, DRINK, READABLE, THING, PLACE = (
    "person", "animal", "food", "drink", "readable", "thing", "place")
ANIMATE = frozenset({PERSON, ANIMAL})


@dataclasses.dataclass(frozen=True)
class Noun:
    es: str
    es_plural: str
    feminine: bool
    en: str
    en_plural: str
    category: str
    mass: bool = False  # mass nouns (milk, coffee) are singular only and take no numbers


def _noun(spec: str, category: str, mass: bool = False) -> Noun:
    # "es[/es_plural] m|f en[/en_plural]"; default plurals add -s (-es after a consonant in es).
    es, gender, en = spec.split(" ", 2)
    es_sg, _, es_pl = es.partition("/")
    en_sg, _, en_pl = en.partition("/")
    if not es_pl:
        es_pl = es_sg + ("s" if es_sg[-1] in "aeiouéá" else "es")
    if not en_pl:
        if en_sg.endswith(("ch", "sh", "s", "x", "z")):
            en_pl = en_sg + "es"
        elif en_sg.endswith("y") and en_sg[-2] not in "aeiou":
            en_pl = en_sg[:-1] + "ies"
        else:
            en_pl = en_sg + "s"
    return Noun(es_sg, es_pl, gender == "f", en_sg, en_pl, category, mass)


_NOUN_SPECS = {
    PERSON: [
        "niño m boy", "niña f girl", "hombre m man/men", "mujer f woman/women",
        "maestro m teacher", "maestra f teacher", "médico m doctor", "alumno m student",
        "alumna f student", "abuelo m grandfather", "abuela f grandmother", "hermano m brother",
        "hermana f sister", "amigo m friend", "amiga f friend", "vecino m neighbor",
        "vecina f neighbor", "granjero m farmer", "soldado m soldier", "rey/reyes m king",
        "reina f queen", "pescador m fisherman/fishermen", "cocinero m cook", "príncipe m prince",
        "princesa f princess", "policía m policeman/policemen", "bebé m baby",
    ],
    ANIMAL: [
        "perro m dog", "gato m cat", "caballo m horse", "pájaro m bird",
        "ratón/ratones m mouse/mice", "vaca f cow", "oveja f sheep/sheep", "gallina f hen",
        "conejo m rabbit", "elefante m elephant",
        "león/leones m lion", "tigre m tiger", "oso m bear", "mono m monkey", "zorro m fox",
        "pato m duck", "lobo m wolf/wolves", "serpiente f snake", "tortuga f turtle",
    ],
    FOOD: [
        "manzana f apple", "naranja f orange", "pera f pear", "plátano m banana", "uva f grape",
        "galleta f cookie", "pastel m cake", "tomate m tomato/tomatoes", "huevo m egg",
        "zanahoria f carrot", "cebolla f onion", "fresa f strawberry",
        "limón/limones m lemon", "patata f potato/potatoes", "sandía f watermelon",
        "pescado m fish/fish", "bocadillo m sandwich",
    ],
    DRINK: ["leche f milk", "café m coffee", "té m tea", "zumo m juice", "vino m wine",
            "sopa f soup"],
    READABLE: [
        "libro m book", "carta f letter", "periódico m newspaper", "revista f magazine",
        "cuento m story", "poema m poem", "mapa m map", "mensaje m message",
        "canción/canciones f song", "novela f novel",
    ],
    THING: [
        "mesa f table", "silla f chair", "puerta f door", "ventana f window", "caja f box",
        "coche m car", "bicicleta f bicycle", "camisa f shirt", "zapato m shoe", "sombrero m hat",
        "vaso m glass", "plato m plate", "llave f key", "pelota f ball", "cuchara f spoon",
        "reloj m watch", "lápiz/lápices m pencil", "cuadro m painting", "bolso m bag",
        "paraguas/paraguas m umbrella", "lámpara f lamp", "espejo m mirror", "muñeca f doll",
        "juguete m toy", "barco m boat", "flor f flower", "piedra f stone", "vela f candle",
        "cama f bed", "sofá m sofa", "teléfono m phone", "ordenador m computer",
    ],
    PLACE: [
        "casa f house", "jardín/jardines m garden", "parque m park", "río m river",
        "ciudad f city", "escuela f school", "montaña f mountain", "bosque m forest",
        "playa f beach", "calle f street", "mercado m market", "cocina f kitchen",
        "biblioteca f library", "puente m bridge", "iglesia f church", "tienda f shop",
        "granja f farm", "lago m lake", "árbol m tree", "museo m museum",
        "estación/estaciones f station",
        "hospital m hospital", "pueblo m village", "castillo m castle", "isla f island",
    ],
}

NOUNS: dict[str, Noun] = {}
for _category, _specs in _NOUN_SPECS.items():
    for _spec in _specs:
        _n = _noun(_spec, _category, mass=_category == DRINK)
        NOUNS[_n.es] = _n
NOUNS_BY_CATEGORY: dict[str, list[Noun]] = {
    c: [n for n in NOUNS.values() if n.category == c] for c in _NOUN_SPECS}


@dataclasses.dataclass(frozen=True)
class Adjective:
    forms: tuple[str, str, str, str]  # Spanish masc. sg, fem. sg, masc. pl, fem. pl
    en: str
    categories: frozenset[str] | None  # noun categories it may modify (None: any)
    copula: str  # "ser" or "estar": the Spanish verb used when it is a predicate


def _adjective(spec: str, categories: frozenset[str] | None = None,
               copula: str = "ser") -> Adjective:
    es, en = spec.split(" ", 1)
    if "/" in es:
        forms = tuple(es.split("/"))
    elif es.endswith("o"):
        forms = (es, es[:-1] + "a", es + "s", es[:-1] + "as")
    elif es.endswith("e"):
        forms = (es, es, es + "s", es + "s")
    else:
        forms = (es, es, es + "es", es + "es")
    return Adjective(forms, en, categories, copula)


_CONCRETE = frozenset({ANIMAL, FOOD, THING, PLACE, READABLE, PERSON})
_OBJECTS = frozenset({FOOD, THING, PLACE, READABLE})
_ADJECTIVE_SPECS: list[tuple[str, frozenset[str] | None, str]] = [
    ("rojo red", _CONCRETE - {PERSON}, "ser"), ("verde green", _CONCRETE - {PERSON}, "ser"),
    ("azul blue", _CONCRETE - {PERSON}, "ser"), ("amarillo yellow", _CONCRETE - {PERSON}, "ser"),
    ("negro black", _CONCRETE - {PERSON}, "ser"), ("blanco white", _CONCRETE - {PERSON}, "ser"),
    ("gris grey", _CONCRETE - {PERSON}, "ser"),
    ("marrón/marrón/marrones/marrones brown", _CONCRETE - {PERSON}, "ser"),
    ("grande big", None, "ser"), ("pequeño small", None, "ser"), ("viejo old", None, "ser"),
    ("nuevo new", _OBJECTS, "ser"), ("alto tall", frozenset({PERSON, ANIMAL, PLACE}), "ser"),
    ("bajo short", frozenset({PERSON, ANIMAL}), "ser"), ("largo long", _OBJECTS, "ser"),
    ("bonito pretty", None, "ser"), ("feo ugly", None, "ser"), ("hermoso beautiful", None, "ser"),
    ("rápido fast", ANIMATE | {THING}, "ser"), ("lento slow", ANIMATE | {THING}, "ser"),
    ("joven/joven/jóvenes/jóvenes young", ANIMATE, "ser"),
    ("rico rich", frozenset({PERSON}), "ser"),
    ("pobre poor", frozenset({PERSON}), "ser"), ("famoso famous", None, "ser"),
    ("inteligente intelligent", ANIMATE, "ser"), ("amable kind", frozenset({PERSON}), "ser"),
    ("valiente brave", ANIMATE, "ser"), ("fuerte strong", ANIMATE, "ser"),
    ("débil weak", ANIMATE, "ser"), ("caro expensive", _OBJECTS, "ser"),
    ("barato cheap", _OBJECTS, "ser"), ("pesado heavy", frozenset({THING, READABLE}), "ser"),
    ("ligero light", frozenset({THING}), "ser"), ("enorme huge", None, "ser"),
    ("antiguo ancient", frozenset({THING, PLACE, READABLE}), "ser"),
    ("moderno modern", frozenset({THING, PLACE}), "ser"),
    ("dulce sweet", frozenset({FOOD, DRINK, PERSON, ANIMAL}), "ser"),
    ("oscuro dark", frozenset({PLACE, THING}), "ser"),
    ("tranquilo quiet", frozenset({PLACE, PERSON, ANIMAL}), "ser"),
    ("interesante interesting", frozenset({READABLE, PLACE, PERSON}), "ser"),
    ("feliz/feliz/felices/felices happy", ANIMATE, "estar"),
    ("triste sad", ANIMATE, "estar"), ("cansado tired", ANIMATE, "estar"),
    ("hambriento hungry", ANIMATE, "estar"), ("enfermo sick", ANIMATE, "estar"),
    ("ocupado busy", frozenset({PERSON}), "estar"), ("enfadado angry", ANIMATE, "estar"),
    ("sucio dirty", _CONCRETE - {READABLE}, "estar"),
    ("limpio clean", _CONCRETE - {READABLE}, "estar"),
    ("caliente hot", frozenset({FOOD, DRINK, THING}), "estar"),
    ("frío cold", frozenset({FOOD, DRINK, THING, PLACE}), "estar"),
    ("fresco fresh", frozenset({FOOD, DRINK}), "estar"),
    ("roto broken", frozenset({THING}), "estar"),
    ("vacío empty", frozenset({THING, PLACE}), "estar"),
    ("lleno full", frozenset({THING, PLACE}), "estar"),
]
ADJECTIVES: dict[str, Adjective] = {}
for _spec, _cats, _copula in _ADJECTIVE_SPECS:
    _a = _adjective(_spec, _cats, _copula)
    ADJECTIVES[_a.forms[0]] = _a


@dataclasses.dataclass(frozen=True)
class Verb:
    es: tuple[str, str, str, str, str]  # yo, tú, él/ella, nosotros, ellos/ellas
    en: str  # base form, may be several words ("look for")
    en_3sg: str
    objects: frozenset[str] | None  # noun categories of the direct object; None: intransitive


def _verb(infinitive: str, en: str, objects: frozenset[str] | None, forms: str = "",
          en_3sg: str = "") -> Verb:
    if forms:
        es = tuple(forms.split())
    else:
        stem, ending = infinitive[:-2], infinitive[-2:]
        es = {"ar": (stem + "o", stem + "as", stem + "a", stem + "amos", stem + "an"),
              "er": (stem + "o", stem + "es", stem + "e", stem + "emos", stem + "en"),
              "ir": (stem + "o", stem + "es", stem + "e", stem + "imos", stem + "en")}[ending]
    if not en_3sg:
        head, _, rest = en.partition(" ")
        head += "es" if head.endswith(("ch", "sh", "s", "x")) else "s"
        en_3sg = f"{head} {rest}".strip()
    return Verb(es, en, en_3sg, objects)


_ALL_OBJECTS = frozenset({PERSON, ANIMAL, FOOD, DRINK, READABLE, THING, PLACE})
VERBS: dict[str, Verb] = {
    "comer": _verb("comer", "eat", frozenset({FOOD})),
    "beber": _verb("beber", "drink", frozenset({DRINK})),
    "ver": _verb("ver", "see", _ALL_OBJECTS, "veo ves ve vemos ven"),
    "mirar": _verb("mirar", "watch", frozenset({PERSON, ANIMAL, THING, PLACE})),
    "buscar": _verb("buscar", "look for", frozenset({PERSON, ANIMAL, THING, READABLE, FOOD})),
    "comprar": _verb("comprar", "buy", frozenset({FOOD, DRINK, THING, READABLE})),
    "vender": _verb("vender", "sell", frozenset({FOOD, DRINK, THING, READABLE, ANIMAL})),
    "tener": _verb("tener", "have", frozenset({ANIMAL, THING, READABLE, FOOD}),
                   "tengo tienes tiene tenemos tienen", "has"),
    "querer": _verb("querer", "want", frozenset({FOOD, DRINK, THING, READABLE, ANIMAL}),
                    "quiero quieres quiere queremos quieren"),
    "necesitar": _verb("necesitar", "need", frozenset({FOOD, DRINK, THING, READABLE})),
    "encontrar": _verb("encontrar", "find", frozenset({PERSON, ANIMAL, THING, READABLE, FOOD}),
                       "encuentro encuentras encuentra encontramos encuentran"),
    "llevar": _verb("llevar", "carry", frozenset({FOOD, THING, READABLE}), en_3sg="carries"),
    "lavar": _verb("lavar", "wash", frozenset({THING, ANIMAL})),
    "pintar": _verb("pintar", "paint", frozenset({THING, PLACE})),
    "abrir": _verb("abrir", "open", frozenset({THING, READABLE})),
    "cerrar": _verb("cerrar", "close", frozenset({THING, READABLE}),
                    "cierro cierras cierra cerramos cierran"),
    "romper": _verb("romper", "break", frozenset({THING})),
    "leer": _verb("leer", "read", frozenset({READABLE})),
    "escribir": _verb("escribir", "write", frozenset({READABLE})),
    "dibujar": _verb("dibujar", "draw", frozenset({PERSON, ANIMAL, THING, PLACE})),
    "cuidar": _verb("cuidar", "take care of", frozenset({PERSON, ANIMAL}), en_3sg="takes care of"),
    "ayudar": _verb("ayudar", "help", frozenset({PERSON})),
    "llamar": _verb("llamar", "call", frozenset({PERSON, ANIMAL})),
    "visitar": _verb("visitar", "visit", frozenset({PERSON, PLACE})),
    "conocer": _verb("conocer", "know", frozenset({PERSON, PLACE}),
                     "conozco conoces conoce conocemos conocen"),
    "cocinar": _verb("cocinar", "cook", frozenset({FOOD})),
    "preparar": _verb("preparar", "prepare", frozenset({FOOD, DRINK})),
    "traer": _verb("traer", "bring", frozenset({FOOD, DRINK, THING, READABLE}),
                   "traigo traes trae traemos traen"),
    "seguir": _verb("seguir", "follow", frozenset({PERSON, ANIMAL}),
                    "sigo sigues sigue seguimos siguen"),
    "vivir": _verb("vivir", "live", None),
    "caminar": _verb("caminar", "walk", None),
    "correr": _verb("correr", "run", None),
    "dormir": _verb("dormir", "sleep", None, "duermo duermes duerme dormimos duermen"),
    "jugar": _verb("jugar", "play", None, "juego juegas juega jugamos juegan"),
    "trabajar": _verb("trabajar", "work", None),
    "cantar": _verb("cantar", "sing", None),
    "bailar": _verb("bailar", "dance", None),
    "nadar": _verb("nadar", "swim", None),
    "esperar": _verb("esperar", "wait", None),
    "descansar": _verb("descansar", "rest", None),
}
TRANSITIVE = [k for k, v in VERBS.items() if v.objects is not None]
INTRANSITIVE = [k for k, v in VERBS.items() if v.objects is None]

# Copulas: Spanish "ser"/"estar" both become English "be".
_COPULA_ES = {"ser": ("soy", "eres", "es", "somos", "son"),
              "estar": ("estoy", "estás", "está", "estamos", "están")}
_BE_EN = ("am", "are", "is", "are", "are")

# Subject pronouns: Spanish form, person index (0..4 as in Verb.es), feminine, English form.
PRONOUNS: dict[str, tuple[int, bool, str]] = {
    "yo": (0, False, "I"), "tú": (1, False, "you"),
    "él": (2, False, "he"), "ella": (2, True, "she"),
    "nosotros": (3, False, "we"), "nosotras": (3, True, "we"),
    "ellos": (4, False, "they"), "ellas": (4, True, "they"),
}
_DROPPABLE = {"yo", "tú", "nosotros", "nosotras"}  # 1st/2nd person: the verb form says who
_FREE_GENDER = {"yo", "tú"}  # their gender shows only in a predicate adjective

# Prepositions: Spanish, English, categories of the noun they take.
PREPOSITIONS: dict[str, tuple[str, frozenset[str]]] = {
    "en": ("in", frozenset({PLACE})),
    "sobre": ("on", frozenset({THING})),
    "cerca de": ("near", frozenset({PLACE, THING})),
    "debajo de": ("under", frozenset({THING, PLACE})),
    "detrás de": ("behind", frozenset({THING, PLACE})),
    "delante de": ("in front of", frozenset({THING, PLACE})),
    "al lado de": ("next to", frozenset({THING, PLACE, PERSON})),
    "con": ("with", frozenset({PERSON, ANIMAL})),
    "sin": ("without", frozenset({THING, READABLE})),
    "para": ("for", frozenset({PERSON})),
}

_DAYS = [("lunes", "Monday"), ("martes", "Tuesday"), ("miércoles", "Wednesday"),
         ("jueves", "Thursday"), ("viernes", "Friday"), ("sábado", "Saturday"),
         ("domingo", "Sunday")]
TIMES: dict[str, str] = {
    "hoy": "today", "ahora": "now", "mañana": "tomorrow", "todos los días": "every day",
    "por la mañana": "in the morning", "por la tarde": "in the afternoon",
    "por la noche": "at night", "esta semana": "this week", "a veces": "sometimes",
    **{f"el {es}": f"on {en}" for es, en in _DAYS},
    **{f"los {es if es.endswith('s') else es + 's'}": f"on {en}s" for es, en in _DAYS},
}

# Adverbs placed before the Spanish verb; English puts them after "be", before other verbs.
ADVERBS: dict[str, str] = {"siempre": "always", "nunca": "never", "a menudo": "often",
                           "también": "also"}

# Determiners: Spanish (m sg, f sg, m pl, f pl), English (sg, pl). "" means no word.
DETERMINERS: dict[str, tuple[tuple[str, str, str, str], tuple[str, str]]] = {
    "def": (("el", "la", "los", "las"), ("the", "the")),
    "indef": (("un", "una", "", ""), ("a", "")),
    "some": (("", "", "unos", "unas"), ("", "some")),
    "this": (("este", "esta", "estos", "estas"), ("this", "these")),
    "that": (("ese", "esa", "esos", "esas"), ("that", "those")),
    "my": (("mi", "mi", "mis", "mis"), ("my", "my")),
    "our": (("nuestro", "nuestra", "nuestros", "nuestras"), ("our", "our")),
    "none": (("", "", "", ""), ("", "")),
}

# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

_ES_UNITS = ["", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve"]
_ES_TEENS = ["diez", "once", "doce", "trece", "catorce", "quince", "dieciséis", "diecisiete",
             "dieciocho", "diecinueve"]
_ES_TWENTIES = ["veinte", "veintiuno", "veintidós", "veintitrés", "veinticuatro", "veinticinco",
                "veintiséis", "veintisiete", "veintiocho", "veintinueve"]
_ES_TENS = ["", "", "", "treinta", "cuarenta", "cincuenta", "sesenta", "setenta", "ochenta",
            "noventa"]
_ES_HUNDREDS = ["", "", "doscient", "trescient", "cuatrocient", "quinient", "seiscient",
                "setecient", "ochocient", "novecient"]
_EN_SMALL = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
             "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
             "eighteen", "nineteen"]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_to_spanish(n: int, feminine: bool = False) -> str:
    """Spells 1 <= n <= 999 as it is said before a noun of the given gender.

    "uno" shortens to "un"/"una" before a noun ("veintiún perros", "treinta y una manzanas")
    and the hundreds agree ("doscientas manzanas").
    """
    if not 1 <= n <= 999:
        raise ValueError(f"number must be in 1..999, got {n}")
    hundreds, rest = divmod(n, 100)
    words = []
    if hundreds == 1:
        words.append("cien" if rest == 0 else "ciento")
    elif hundreds:
        words.append(_ES_HUNDREDS[hundreds] + ("as" if feminine else "os"))
    if rest:
        tens, units = divmod(rest, 10)
        one = "una" if feminine else "un"
        if rest < 10:
            words.append(one if units == 1 else _ES_UNITS[units])
        elif rest < 20:
            words.append(_ES_TEENS[units])
        elif rest < 30:
            words.append(("veintiuna" if feminine else "veintiún") if units == 1
                         else _ES_TWENTIES[units])
        else:
            words.append(_ES_TENS[tens])
            if units:
                words += ["y", one if units == 1 else _ES_UNITS[units]]
    return " ".join(words)


def number_to_english(n: int) -> str:
    """Spells 1 <= n <= 999 in American English ("three hundred forty-two")."""
    if not 1 <= n <= 999:
        raise ValueError(f"number must be in 1..999, got {n}")
    hundreds, rest = divmod(n, 100)
    words = [f"{_EN_SMALL[hundreds]} hundred"] if hundreds else []
    if rest:
        tens, units = divmod(rest, 10)
        if rest < 20:
            words.append(_EN_SMALL[rest])
        else:
            words.append(_EN_TENS[tens] + (f"-{_EN_SMALL[units]}" if units else ""))
    return " ".join(words)


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
            es = (es_subject + negation + pre_adverb + [_COPULA_ES[adjective.copula][person]]
                  + very_es + [adjective.forms[_gender_number_index(feminine, plural)]])
            # English adverbs and "not" follow "be": "is always tired", "is not tired".
            en = (en_subject + [_BE_EN[person]] + (["not"] if sentence.negated else [])
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
    if count < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    pairs = iter_pairs(split, seed)
    return [next(pairs) for _ in range(count)]

"""The built-in corpus's vocabulary tables: nouns, adjectives, verbs, pronouns, prepositions,
times (days), adverbs, determiners, and numbers spelled out, each word with its Spanish forms
and its English translation.

`tfformer.data.builtin.grammar` builds sentences of these words: it picks the forms that agree
and puts the words in each language's order.
"""

from __future__ import annotations

import dataclasses

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
COPULA_ES = {"ser": ("soy", "eres", "es", "somos", "son"),
              "estar": ("estoy", "estás", "está", "estamos", "están")}
BE_EN = ("am", "are", "is", "are", "are")

# Subject pronouns: Spanish form, person index (0..4 as in Verb.es), feminine, English form.
PRONOUNS: dict[str, tuple[int, bool, str]] = {
    "yo": (0, False, "I"), "tú": (1, False, "you"),
    "él": (2, False, "he"), "ella": (2, True, "she"),
    "nosotros": (3, False, "we"), "nosotras": (3, True, "we"),
    "ellos": (4, False, "they"), "ellas": (4, True, "they"),
}

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

"""Whole documents: split into sentences, translated as one batch, joined back with the
document's own separators. TensorFlow's core string ops only (RE2 regular expressions), so the
export's `translate_document` signature runs in stock TF Serving.

The rule (written once, here): a sentence ends at sentence-final punctuation (. ! ? …, with any
closing quotes or brackets after it) followed by whitespace, and at every line break; the
whitespace between two sentences (spaces, newlines, blank lines) is their separator and comes
back unchanged, as does the whitespace before the first sentence and after the last. A period
after one of ABBREVIATIONS or after a single capital letter (an initial) ends no sentence.
Empty sentences (blank lines) are not translated.
"""

from __future__ import annotations

import tensorflow as tf

# Words whose period ends no sentence (English and Spanish, case as written): Moses'
# nonbreaking-prefix lists' common entries.
ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Dr", "Prof", "Sr", "Sra", "Srta", "Sres", "Dra", "Jr", "St",
                 "Mt", "Ud", "Uds", "Vd", "Vds", "vs", "etc", "approx", "cf", "Fig", "fig", "No",
                 "nr", "núm", "pp", "p", "vol", "ed", "cap", "art", "Av", "Avda", "Co", "Inc",
                 "Ltd", "Corp", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept",
                 "Oct", "Nov", "Dec", "e.g", "i.e", "a.m", "p.m", "EE.UU", "U.S")

_CUT = "\x1f"  # between a sentence and a separator (the input's own are made spaces)
_KEPT_PERIOD = "\x1e"  # an abbreviation's period while the document is cut
_ABBREVIATION = (r"(^|[^\pL\pN])(" + "|".join(a.replace(".", r"\.") for a in ABBREVIATIONS)
                 + r"|\p{Lu})\.")
_BOUNDARY = (r"([.!?…][\"'”’»)\]]*)(\s+)"  # punctuation, then whitespace (may hold newlines)
             r"|([^\S\n]*\n\s*)"  # a line break with the whitespace around it
             r"|^(\s+)|(\s+)$")  # before the first sentence, after the last


def split_documents(documents: tf.Tensor) -> tf.RaggedTensor:
    """tf.string [batch] -> [batch, (2 n - 1)]: sentence, separator, sentence, ..., sentence
    (the first and last may be empty: whitespace at the start or the end). The parts of a row
    joined give its document back."""
    text = tf.strings.regex_replace(documents, f"[{_CUT}{_KEPT_PERIOD}]", " ")
    text = tf.strings.regex_replace(text, _ABBREVIATION, rf"\1\2{_KEPT_PERIOD}")
    # RE2 has no conditional replacement: the groups that did not match are empty.
    text = tf.strings.regex_replace(text, _BOUNDARY, rf"\1{_CUT}\2\3\4\5{_CUT}")
    parts = tf.strings.split(text, _CUT)
    return tf.ragged.map_flat_values(tf.strings.regex_replace, parts, _KEPT_PERIOD, ".")


def is_sentence(parts: tf.RaggedTensor) -> tf.RaggedTensor:
    """bool, like `parts`: the sentences (even positions) rather than the separators."""
    positions = tf.ragged.range(parts.row_lengths())
    return tf.equal(positions % 2, 0)


def chunk_rows(pieces: tf.RaggedTensor, limit: int) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """Rows [n, (p)] cut into chunks of at most `limit` values: ([chunks, (<= limit)], int32
    [n], the number of chunks of each row (1 for an empty row))."""
    positions = tf.ragged.range(pieces.row_lengths())
    chunk_of_value = (positions // limit).flat_values
    chunks = tf.maximum((pieces.row_lengths() + limit - 1) // limit, 1)
    first_chunk = tf.cumsum(chunks, exclusive=True)
    value_rows = tf.gather(first_chunk, pieces.value_rowids()) + chunk_of_value
    chunked = tf.RaggedTensor.from_value_rowids(pieces.flat_values, value_rows,
                                                nrows=tf.reduce_sum(chunks))
    return chunked, tf.cast(chunks, tf.int32)

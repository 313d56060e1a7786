"""Records: the pairs of any source as they flow through `tf.data`, the line rules that check
them in the graph, and `DataError`, which names the file and line of a bad one.

A record batch is a dict of [n] tensors: origin (the file, "tfds:NAME[split]" or
"builtin:train"), line (1-based), source and target (stripped), and reason ("" for a good pair).
The readers (`tfformer.data.tsv`, `tfformer.data.tfds`, `pair_records` for pairs in memory) make
them, `tfformer.data.sources.Corpus` streams them, and `collect` reads them into memory.

The functions that `tf.data` traces are written in TensorFlow ops, without Python control flow on
tensors: they are marked `do_not_convert`, which saves every process that builds a pipeline the
seconds autograph takes to convert them.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.errors import DATA_ERROR_END, DATA_ERROR_MARK, DataError

Pair = tuple[str, str]

RECORD_BATCH = 1024  # lines checked per graph call


@dataclasses.dataclass(frozen=True)
class ParallelText:
    """Sentence pairs held in memory (a dev or test set, or a small corpus).

    Attributes:
        pairs: the (source, target) pairs, each side stripped of surrounding whitespace.
        path: where they came from (a file path, "tfds:NAME[split]" or "builtin:split").
        skipped: (1-based line number, reason) of every bad line skipped.
    """

    pairs: list[Pair]
    path: str
    skipped: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    @property
    def num_skipped(self) -> int:
        return len(self.skipped)

    def __len__(self) -> int:
        return len(self.pairs)


def _check_pairs(source: tf.Tensor, target: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Strips both sides of a batch of pairs; returns (source, target, reason), reason "" when
    the pair is good."""
    source, target = tf.strings.strip(source), tf.strings.strip(target)
    no_source, no_target = tf.equal(source, ""), tf.equal(target, "")
    reason = tf.where(no_source & no_target, "empty source and target sides",
                      tf.where(no_source, "empty source side",
                               tf.where(no_target, "empty target side", "")))
    return source, target, reason


def valid_utf8(strings: tf.Tensor) -> tf.Tensor:
    # Transcoding replaces every invalid sequence, so valid text is exactly the text it keeps.
    return tf.equal(tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD), strings)


def parse_tsv_lines(lines: tf.Tensor, numbers: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Splits a batch of ``source<TAB>target`` lines and checks them.

    A line is bad if it is not valid UTF-8, is blank, has no TAB or more than one, or has an
    empty side after stripping whitespace. A BOM on line 1 and a CR before the newline are
    accepted.

    Args:
        lines: tf.string [n], without their newline.
        numbers: int64 [n], each line's 1-based number in its file.

    Returns:
        (source, target, reason): tf.string [n] each, reason "" for a good line.
    """
    lines = tf.where(tf.equal(numbers, 1), tf.strings.regex_replace(lines, "^\ufeff", ""), lines)
    lines = tf.strings.regex_replace(lines, "\r$", "")
    tabs = tf.strings.length(lines) - tf.strings.length(tf.strings.regex_replace(lines, "\t", ""))
    source = tf.strings.regex_replace(lines, "(?s)\t.*", "")
    target = tf.strings.regex_replace(lines, "(?s)^[^\t]*\t", "")
    source, target, reason = _check_pairs(source, target)
    reason = tf.where(tabs > 1, tf.strings.join([tf.strings.as_string(tabs),
                                                 " TAB separators, expected exactly 1"]), reason)
    reason = tf.where(tf.equal(tabs, 0), "no TAB separator", reason)
    reason = tf.where(tf.equal(tf.strings.strip(lines), ""), "empty line", reason)
    reason = tf.where(valid_utf8(lines), reason, "invalid UTF-8")
    return source, target, reason


@do_not_convert
def _check_records(records: dict) -> dict:
    source, target, reason = _check_pairs(records["source"], records["target"])
    return {**records, "source": source, "target": target,
            "reason": tf.where(tf.equal(records["reason"], ""), reason, records["reason"])}


def pair_records(pairs: Sequence[Pair], origin: str) -> tf.data.Dataset:
    """In-memory pairs as records, one element per pair (line = 1-based index); `batch_records`
    checks them."""
    return tf.data.Dataset.from_tensor_slices({
        "origin": tf.fill([len(pairs)], origin),
        "line": tf.range(1, len(pairs) + 1, dtype=tf.int64),
        "source": tf.constant([s for s, _ in pairs], tf.string),
        "target": tf.constant([t for _, t in pairs], tf.string),
        "reason": tf.fill([len(pairs)], "")})


def batch_records(records: tf.data.Dataset) -> tf.data.Dataset:
    """Record elements -> checked record batches, as `tfformer.data.tsv.tsv_records` yields them."""
    return records.batch(RECORD_BATCH).map(_check_records)


@do_not_convert
def stop_at_bad_records(records: dict) -> dict:
    """Passes a batch of good records on; fails the pipeline at the first bad one with
    MARK + "FILE:LINE: reason" + END."""
    bad = tf.not_equal(records["reason"], "")
    first = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
    located = tf.strings.join([
        DATA_ERROR_MARK, tf.gather(records["origin"], first), ":",
        tf.strings.as_string(tf.gather(records["line"], first)), ": ",
        tf.gather(records["reason"], first), DATA_ERROR_END])
    check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [located])
    with tf.control_dependencies([check]):
        return {key: tf.identity(value) for key, value in records.items()}


def checked_batches(records: tf.data.Dataset, skip_bad_lines: bool
                    ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(record batch as NumPy, bad-line mask); raises DataError at the first bad line unless
    skip_bad_lines."""
    for batch in records.prefetch(2).as_numpy_iterator():
        bad = batch["reason"] != b""
        if bad.any() and not skip_bad_lines:
            first = int(np.argmax(bad))
            raise DataError(batch["origin"][first].decode(), int(batch["line"][first]),
                            batch["reason"][first].decode())
        yield batch, bad


def utf8_strings(values: np.ndarray) -> list[str]:
    """A NumPy array of UTF-8 bytes (a tf.string tensor's value) as Python strings."""
    return [value.decode("utf-8") for value in values]


def collect(records: tf.data.Dataset, origin: str, skip_bad_lines: bool) -> ParallelText:
    pairs: list[Pair] = []
    skipped: list[tuple[int, str]] = []
    for batch, bad in checked_batches(records, skip_bad_lines):
        skipped += [(int(n), r.decode()) for n, r in
                    zip(batch["line"][bad], batch["reason"][bad])]
        good = ~bad
        pairs += zip(utf8_strings(batch["source"][good]), utf8_strings(batch["target"][good]))
    if not pairs:
        raise DataError(origin, None, f"no valid line ({len(skipped)} bad lines skipped)")
    return ParallelText(pairs, origin, skipped)

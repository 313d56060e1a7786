"""Where the parallel text comes from: data specs, the TSV / TFDS / built-in readers, file checks.

A data spec (what `tfformer-train --data` takes) names a `Corpus`:

* ``builtin`` or ``builtin:N`` – the synthetic Spanish→English corpus (`tfformer.data.builtin`);
* ``tsv:TRAIN[,DEV]`` – UTF-8 ``source<TAB>target`` lines. TRAIN is one or more files or glob
  patterns joined by ``+`` (``tsv:data/train-*.tsv.gz+extra.tsv,data/dev.tsv``); ``.gz`` files
  are read as gzip. Without DEV, a seeded hash of each pair holds 1 % of TRAIN out of training
  and the first 1000 of those are the dev set (`tfformer.data.scan` finds them);
* ``tfds:NAME`` – a TensorFlow Datasets translation set, e.g. ``ted_hrlr_translate/pt_to_en``;
* ``reverse:SPEC`` – SPEC with source and target swapped.

The training side is never held in memory: `Corpus.records` streams it with `tf.data` (file-level
shuffling, sharding per worker) and checks every line in the graph by the rules of
`parse_tsv_lines`. A bad line raises `DataError` naming the file and the 1-based line, or is
skipped and counted with `skip_bad_lines`. Dev and test sets are read into memory by the same
rules: `read_tsv` is the one TSV reader (`tfformer.evaluate` reads test sets with it).

The functions that `tf.data` traces here and in `tfformer.data.batching` are written in TensorFlow
ops, without Python control flow on tensors: they are marked `do_not_convert`, which saves
every process that builds a pipeline the seconds autograph takes to convert them.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import os
import zlib
from typing import Iterator, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.builtin import builtin_pairs

Pair = tuple[str, str]

TFDS_DEV_SPLIT = "validation"  # newstest2013 for wmt14_translate
# A bad line found inside the tf.data graph fails it with MARK + "FILE:LINE: reason" + END.
DATA_ERROR_MARK = "tfformer data error: "
DATA_ERROR_END = " (end of tfformer data error)"
RECORD_BATCH = 1024  # lines checked per graph call


class DataError(ValueError):
    """Bad input data. The message starts with "FILE:LINE: " when a line is to blame.

    Attributes:
        path: the file (or "tfds:NAME[split]") at fault.
        line: the 1-based line (or example) number, or None for the whole file.
        reason: what is wrong, without the location.
    """

    def __init__(self, path: str, line: int | None, reason: str):
        self.path, self.line, self.reason = path, line, reason
        super().__init__(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")

    @classmethod
    def from_graph_error(cls, error: Exception) -> "DataError | None":
        """The DataError a tf.data assertion raised for a bad line (see `Corpus.records`), or
        None if `error` is something else."""
        message = str(getattr(error, "message", error))
        start = message.find(DATA_ERROR_MARK)
        if start < 0:
            return None
        located = message[start + len(DATA_ERROR_MARK):].split(DATA_ERROR_END)[0]
        path, line, reason = _split_location(located)
        return cls(path, line, reason)


def _split_location(located: str) -> tuple[str, int | None, str]:
    # "PATH:LINE: REASON", where PATH may itself hold colons.
    head, sep, reason = located.partition(": ")
    path, _, line = head.rpartition(":")
    if sep and line.isdigit():
        return path, int(line), reason
    return located, None, ""


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


# ---------------------------------------------------------------------------------------------
# The line rules, in the graph
# ---------------------------------------------------------------------------------------------


def _check_pairs(source: tf.Tensor, target: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Strips both sides of a batch of pairs; returns (source, target, reason), reason "" when
    the pair is good."""
    source, target = tf.strings.strip(source), tf.strings.strip(target)
    no_source, no_target = tf.equal(source, ""), tf.equal(target, "")
    reason = tf.where(no_source & no_target, "empty source and target sides",
                      tf.where(no_source, "empty source side",
                               tf.where(no_target, "empty target side", "")))
    return source, target, reason


def _valid_utf8(strings: tf.Tensor) -> tf.Tensor:
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
    reason = tf.where(_valid_utf8(lines), reason, "invalid UTF-8")
    return source, target, reason


def _compression(path: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def shards_by_file(num_files: int, num_shards: int) -> bool:
    """Whether `num_shards` readers split the data by whole files (else by lines): when every
    reader gets at least one file."""
    return num_files >= num_shards


def tsv_records(paths: Sequence[str], *, shuffle_files: bool = False, seed: int = 0,
                repeat: bool = False, num_shards: int = 1, shard_index: int = 0,
                cycle_length: int = 4) -> tf.data.Dataset:
    """Streams the lines of TSV files as batches of checked records (see `Corpus.records`).

    Args:
        paths: the files (plain, or gzip when named *.gz), read in this order unless shuffled.
        shuffle_files: visit the files in a seeded order, another one on each pass.
        seed: seed of the file order.
        repeat: start over after the last file, forever.
        num_shards, shard_index: keep one shard of `num_shards`: whole files when there are at
            least as many files as shards, else every num_shards-th line of each file (each
            worker of a multi-worker run reads its own).
        cycle_length: files read at once, their batches interleaved (1: one file after the
            other, in order).
    """
    files = tf.data.Dataset.from_tensor_slices(list(paths))
    by_file = shards_by_file(len(paths), num_shards)
    if num_shards > 1 and by_file:
        files = files.shard(num_shards, shard_index)
    if shuffle_files:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        files = files.repeat()

    @do_not_convert
    def read(path):
        lines = tf.data.TextLineDataset(path, compression_type=_compression(path))
        lines = lines.enumerate(start=1)
        if num_shards > 1 and not by_file:
            lines = lines.shard(num_shards, shard_index)

        @do_not_convert
        def parse(numbers, batch):
            # The checks run on whole batches: per-line work stays in TensorFlow's kernels.
            source, target, reason = parse_tsv_lines(batch, numbers)
            return {"origin": tf.fill(tf.shape(batch), path), "line": numbers,
                    "source": source, "target": target, "reason": reason}

        return lines.batch(RECORD_BATCH).map(parse)

    cycle_length = min(cycle_length, len(paths))
    parallel = {"num_parallel_calls": tf.data.AUTOTUNE, "deterministic": True} \
        if cycle_length > 1 else {}
    return files.interleave(read, cycle_length=cycle_length, block_length=1, **parallel)


@do_not_convert
def _check_records(records: dict) -> dict:
    source, target, reason = _check_pairs(records["source"], records["target"])
    return {**records, "source": source, "target": target,
            "reason": tf.where(tf.equal(records["reason"], ""), reason, records["reason"])}


def pair_records(pairs: Sequence[Pair], origin: str) -> tf.data.Dataset:
    """In-memory pairs as records, one element per pair (line = 1-based index); `Corpus.records`
    batches and checks them."""
    return tf.data.Dataset.from_tensor_slices({
        "origin": tf.fill([len(pairs)], origin),
        "line": tf.range(1, len(pairs) + 1, dtype=tf.int64),
        "source": tf.constant([s for s, _ in pairs], tf.string),
        "target": tf.constant([t for _, t in pairs], tf.string),
        "reason": tf.fill([len(pairs)], "")})


def tfds_records(name: str, split: str, data_dir: str | None = None) -> tf.data.Dataset:
    """A TensorFlow Datasets translation split as records, one element per example (line =
    1-based example number). The source is the first supervised key: ``wmt14_translate/de-en``
    gives (de, en). Invalid UTF-8 is marked here; `batch_records` checks the rest.

    Raises:
        ImportError: if tensorflow-datasets is not installed.
    """
    try:
        import tensorflow_datasets as tfds  # lazy: a large optional dependency
    except ImportError:
        raise ImportError(
            f"reading tfds:{name} needs TensorFlow Datasets: pip install tensorflow-datasets"
        ) from None
    origin = f"tfds:{name}[{split}]"
    dataset = tfds.load(name, split=split, as_supervised=True, data_dir=data_dir)

    @do_not_convert
    def record(number, pair):
        source, target = pair
        valid = _valid_utf8(source) & _valid_utf8(target)
        return {"origin": origin, "line": number, "source": source, "target": target,
                "reason": tf.where(valid, "", "invalid UTF-8")}

    return dataset.enumerate(start=1).map(record)


def batch_records(records: tf.data.Dataset) -> tf.data.Dataset:
    """Record elements -> checked record batches, as `tsv_records` yields them."""
    return records.batch(RECORD_BATCH).map(_check_records)


HOLDOUT_KEY_RANGE = 2 ** 62


def holdout_key(record: dict, seed: int) -> tf.Tensor:
    """A seeded hash of the pair's text: the pairs with the smallest keys are held out as dev
    (when no DEV file is given), so duplicates fall on one side and files may move."""
    text = tf.strings.join([record["source"], record["target"]], "\t")
    return tf.strings.to_hash_bucket_strong(text, HOLDOUT_KEY_RANGE, key=[seed, 7919])


@do_not_convert
def _stop_at_bad_records(records: dict) -> dict:
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


# ---------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Corpus:
    """What a data spec names: a training stream and, unless held out, the dev pairs.

    Attributes:
        spec: the data spec.
        kind: "builtin", "tsv" or "tfds".
        files: the TSV training files (glob patterns expanded), or the builtin/tfds name.
        dev: the dev pairs, or None when they are held out of the training files
            (`tfformer.data.scan.scan` collects them).
        holdout_threshold: pairs whose `holdout_key` is at most this are held out of the
            training stream (what the scan found; needed when dev is None).
        swap: source and target are swapped (reverse:SPEC).
        seed: seed of the built-in corpus and of the hold-out hash.
        builtin_size: training pairs of the built-in corpus (None: all).
    """

    spec: str
    kind: str
    files: tuple[str, ...]
    dev: ParallelText | None
    swap: bool = False
    seed: int = 0
    builtin_size: int | None = None
    holdout_threshold: int | None = None

    @property
    def holds_out_dev(self) -> bool:
        return self.dev is None

    def shard_unit(self, num_shards: int) -> str:
        """"file" or "line": how `num_shards` workers split the training side."""
        return "file" if self.kind == "tsv" and shards_by_file(len(self.files), num_shards) \
            else "line"

    def records(self, *, shuffle_files: bool = False, seed: int = 0, repeat: bool = False,
                num_shards: int = 1, shard_index: int = 0,
                in_order: bool = False) -> tf.data.Dataset:
        """The training side as batches of checked records: dicts of [n] tensors origin, line,
        source, target (stripped) and reason ("" for a good pair), held-out dev pairs included
        (`train_pairs` leaves them out); `in_order`: file after file."""
        if self.kind == "tsv":
            records = tsv_records(self.files, shuffle_files=shuffle_files, seed=seed,
                                  repeat=repeat, num_shards=num_shards, shard_index=shard_index,
                                  cycle_length=1 if in_order else 4)
        else:
            if self.kind == "builtin":
                elements = pair_records(
                    builtin_pairs("train", self.builtin_size, self.seed),
                    "builtin:train")
            else:
                elements = tfds_records(self.files[0], "train")
            if num_shards > 1:
                elements = elements.shard(num_shards, shard_index)
            if repeat:
                elements = elements.repeat()
            records = batch_records(elements)
        if self.swap:
            records = records.map(do_not_convert(
                lambda r: {**r, "source": r["target"], "target": r["source"]}))
        return records

    def train_pairs(self, *, skip_bad_lines: bool = False, skipped: tf.Variable | None = None,
                    shuffle_files: bool = False, seed: int = 0, repeat: bool = False,
                    num_shards: int = 1, shard_index: int = 0) -> tf.data.Dataset:
        """The training stream: (source, target) strings of the good, not held-out pairs.

        A bad line fails the iteration with an error that `DataError.from_graph_error` turns
        into a DataError naming its file and line; with `skip_bad_lines` it is skipped and
        counted in `skipped` (an int64 tf.Variable, e.g. a run's `Counters.skipped`) as the
        stream goes by.
        """
        if self.holds_out_dev and self.holdout_threshold is None:
            raise ValueError("a corpus that holds out its dev set needs the holdout_threshold "
                             "its scan found")
        records = self.records(shuffle_files=shuffle_files, seed=seed, repeat=repeat,
                               num_shards=num_shards, shard_index=shard_index)
        if not skip_bad_lines:
            records = records.map(_stop_at_bad_records)

        @do_not_convert
        def keep(batch):
            good = tf.equal(batch["reason"], "")
            if skip_bad_lines and skipped is not None:
                bad = tf.reduce_sum(1 - tf.cast(good, tf.int64))
                with tf.control_dependencies([skipped.assign_add(bad)]):
                    good = tf.identity(good)
            if self.holds_out_dev:
                good &= holdout_key(batch, self.seed) > self.holdout_threshold
            return tf.boolean_mask(batch["source"], good), tf.boolean_mask(batch["target"], good)

        return records.map(keep).unbatch()


def _expand(pattern: str, spec: str) -> list[str]:
    if glob.has_magic(pattern):
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise DataError(pattern, None, f"no file matches this pattern (data spec {spec!r})")
        return matches
    if not os.path.exists(pattern):
        raise DataError(pattern, None, f"no such file (data spec {spec!r})")
    return [pattern]


def _check_file(path: str) -> None:
    """A file must hold something besides whitespace, and a gzip file must be whole.

    tf.data's GZIP reader stops without an error where a truncated stream ends (as an
    interrupted download leaves it), so a cut .gz would train on part of itself, its last line
    cut mid-word. Python's gzip raises there: every .gz is decompressed once here, before the
    scan, the training stream or a dev/test read uses it.
    """
    compressed = path.endswith(".gz")
    text = False
    try:
        with (gzip.open if compressed else open)(path, "rb") as f:
            while chunk := f.read(1 << 20):
                text = text or bool(chunk.strip())
                if text and not compressed:  # a plain file is whole: its first text will do
                    return
    except EOFError:
        raise DataError(path, None, "truncated gzip file: the compressed stream ends before its "
                        "end marker (an interrupted download or copy?)") from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise DataError(path, None, f"not a valid gzip file ({error})") from None
    if not text:
        raise DataError(path, None, "empty file")


def file_signature(path: str) -> list:
    """[path, size, mtime]: a file that still has the signature it had when checked is taken as
    unchanged (a cut or re-written file changes its size or its mtime)."""
    return [path, os.path.getsize(path), int(os.path.getmtime(path))]


def open_corpus(spec: str, *, skip_bad_lines: bool = False, seed: int = 0,
                checked: Sequence[list] = ()) -> Corpus:
    """Parses a data spec (see the module docstring); reads only the dev side.

    `checked`: `file_signature`s of files already checked whole (a resumed run's, recorded by
    its scan): they are not decompressed again, which would re-read a big corpus on every
    start.

    Raises:
        ValueError: a malformed spec. DataError: a missing or empty file, or a bad dev line.
        ImportError: tfds: without tensorflow-datasets.
    """
    kind, _, rest = spec.partition(":")
    if kind == "reverse":
        inner = open_corpus(rest, skip_bad_lines=skip_bad_lines, seed=seed, checked=checked)
        dev = None if inner.dev is None else ParallelText(
            [(t, s) for s, t in inner.dev.pairs], inner.dev.path, inner.dev.skipped)
        return dataclasses.replace(inner, spec=spec, dev=dev, swap=not inner.swap)
    if kind == "builtin":
        size = None
        if rest:
            size = int(rest) if rest.isdigit() else -1
            if size < 1:
                raise ValueError(f"data spec {spec!r}: N in builtin:N must be a positive integer")
        dev = ParallelText(builtin_pairs("dev", None, seed), "builtin:dev")
        return Corpus(spec, "builtin", ("builtin",), dev, seed=seed, builtin_size=size)
    if kind == "tsv":
        parts = rest.split(",") if rest else []
        if not 1 <= len(parts) <= 2 or not all(parts) or not all(parts[0].split("+")):
            raise ValueError(f"data spec {spec!r}: expected tsv:TRAIN[,DEV], TRAIN one or more "
                             "files or glob patterns joined by +")
        files = [path for pattern in parts[0].split("+") for path in _expand(pattern, spec)]
        for path in files:
            if file_signature(path) not in checked:
                _check_file(path)
        dev = None
        if len(parts) == 2:
            dev_files = _expand(parts[1], spec)
            if len(dev_files) > 1:
                raise ValueError(f"data spec {spec!r}: DEV must be one file, {parts[1]!r} "
                                 f"matches {len(dev_files)}")
            dev = read_tsv(dev_files[0], skip_bad_lines=skip_bad_lines)
        return Corpus(spec, "tsv", tuple(files), dev, seed=seed)
    if kind == "tfds":
        if not rest:
            raise ValueError(
                f"data spec {spec!r}: expected tfds:NAME, e.g. tfds:ted_hrlr_translate/pt_to_en")
        dev = _collect(batch_records(tfds_records(rest, TFDS_DEV_SPLIT)),
                       f"tfds:{rest}[{TFDS_DEV_SPLIT}]", skip_bad_lines)
        return Corpus(spec, "tfds", (rest,), dev, seed=seed)
    raise ValueError(f"data spec {spec!r}: expected builtin[:N], tsv:TRAIN[,DEV] or tfds:NAME")


# ---------------------------------------------------------------------------------------------
# Reading into memory (dev and test sets)
# ---------------------------------------------------------------------------------------------


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


def _collect(records: tf.data.Dataset, origin: str, skip_bad_lines: bool) -> ParallelText:
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


def read_tsv(path: str | os.PathLike, *, skip_bad_lines: bool = False) -> ParallelText:
    """Reads a (dev or test) file of ``source<TAB>target`` lines into memory, by the rules of
    `parse_tsv_lines` (plain, or gzip when named *.gz).

    Raises:
        DataError: on the first bad line (unless skip_bad_lines), for an empty file, and for a
            file with no valid line at all.
        OSError: if the file cannot be read.
    """
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(f"{name}: no such file")
    _check_file(name)
    return _collect(tsv_records([name]), name, skip_bad_lines)


def read_tfds(name: str, split: str = "train", *, skip_bad_lines: bool = False,
              data_dir: str | None = None) -> ParallelText:
    """Reads a TensorFlow Datasets translation split into memory (see `tfds_records`)."""
    return _collect(batch_records(tfds_records(name, split, data_dir)),
                    f"tfds:{name}[{split}]", skip_bad_lines)

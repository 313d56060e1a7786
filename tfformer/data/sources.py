"""Where the parallel text comes from: data specs and the `Corpus` each names.

A data spec (what `tfformer-train --data` takes) names a `Corpus`:

* ``builtin`` or ``builtin:N`` – the synthetic Spanish→English corpus (`tfformer.data.builtin`);
* ``tsv:TRAIN[,DEV]`` – UTF-8 ``source<TAB>target`` lines. TRAIN is one or more files or glob
  patterns joined by ``+`` (``tsv:data/train-*.tsv.gz+extra.tsv,data/dev.tsv``); ``.gz`` files
  are read as gzip. Without DEV, a seeded hash of each pair holds 1 % of TRAIN out of training
  and the first 1000 of those are the dev set (`tfformer.data.scan` finds them);
* ``tfds:NAME`` – a TensorFlow Datasets translation set, e.g. ``ted_hrlr_translate/pt_to_en``;
* ``reverse:SPEC`` – SPEC with source and target swapped.

The training side is never held in memory: `Corpus.records` streams it with `tf.data` (file-level
shuffling, sharding per worker) from the readers (`tfformer.data.tsv`, `tfformer.data.tfds`, the
built-in pairs) and checks every line in the graph by the rules of `tfformer.data.records`. A bad
line raises `DataError` naming the file and the 1-based line, or is skipped and counted with
`skip_bad_lines`. Dev and test sets are read into memory by the same rules.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data import tsv, tsv_lines
from tfformer.data.builtin import builtin_pairs
from tfformer.data.records import (
    DataError,
    Pair,
    ParallelText,
    batch_records,
    pair_records,
    parse_tsv_lines,
    stop_at_bad_records,
)
from tfformer.data.tfds import TFDS_DEV_SPLIT, read_tfds, tfds_records
from tfformer.data.tsv import file_signature, read_tsv, shards_by_file, tsv_records

# The readers' names, importable from here as before the readers had modules of their own.
__all__ = ["Corpus", "DataError", "Pair", "ParallelText", "file_signature", "holdout_key",
           "open_corpus", "parse_tsv_lines", "read_tfds", "read_tsv", "tfds_records",
           "tsv_records"]

HOLDOUT_KEY_RANGE = 2 ** 62


def holdout_key(record: dict, seed: int) -> tf.Tensor:
    """A seeded hash of the pair's text: the pairs with the smallest keys are held out as dev
    (when no DEV file is given), so duplicates fall on one side and files may move."""
    text = tf.strings.join([record["source"], record["target"]], "\t")
    return tf.strings.to_hash_bucket_strong(text, HOLDOUT_KEY_RANGE, key=[seed, 7919])


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
            records = records.map(stop_at_bad_records)

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
        files = [path for pattern in parts[0].split("+") for path in tsv.expand(pattern, spec)]
        for path in files:
            if file_signature(path) not in checked:
                tsv_lines.check_file(path)
        dev = None
        if len(parts) == 2:
            dev_files = tsv.expand(parts[1], spec)
            if len(dev_files) > 1:
                raise ValueError(f"data spec {spec!r}: DEV must be one file, {parts[1]!r} "
                                 f"matches {len(dev_files)}")
            dev = read_tsv(dev_files[0], skip_bad_lines=skip_bad_lines)
        return Corpus(spec, "tsv", tuple(files), dev, seed=seed)
    if kind == "tfds":
        if not rest:
            raise ValueError(
                f"data spec {spec!r}: expected tfds:NAME, e.g. tfds:ted_hrlr_translate/pt_to_en")
        dev = read_tfds(rest, TFDS_DEV_SPLIT, skip_bad_lines=skip_bad_lines)
        return Corpus(spec, "tfds", (rest,), dev, seed=seed)
    raise ValueError(f"data spec {spec!r}: expected builtin[:N], tsv:TRAIN[,DEV] or tfds:NAME")

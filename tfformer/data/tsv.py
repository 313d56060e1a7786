"""TSV files of ``source<TAB>target`` lines, plain or gzip (*.gz): streamed by `tsv_records`, read
into memory by `read_tsv` (dev sets; `tfformer.data.tsv_lines` reads them without TensorFlow),
and checked whole by `check_file` (not empty, a gzip stream not cut short)."""

from __future__ import annotations

import glob
import os
from typing import Sequence

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.records import RECORD_BATCH, DataError, ParallelText, parse_tsv_lines
from tfformer.data.tsv_lines import read_pairs


def _compression(path: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def shards_by_file(num_files: int, num_shards: int) -> bool:
    """Whether `num_shards` readers split the data by whole files (else by lines): when every
    reader gets at least one file."""
    return num_files >= num_shards


def tsv_records(paths: Sequence[str], *, shuffle_files: bool = False, seed: int = 0,
                repeat: bool = False, num_shards: int = 1, shard_index: int = 0,
                cycle_length: int = 4) -> tf.data.Dataset:
    """Streams the lines of TSV files as batches of checked records (see `tfformer.data.records`).

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


def expand(pattern: str, spec: str) -> list[str]:
    if glob.has_magic(pattern):
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise DataError(pattern, None, f"no file matches this pattern (data spec {spec!r})")
        return matches
    if not os.path.exists(pattern):
        raise DataError(pattern, None, f"no such file (data spec {spec!r})")
    return [pattern]


def file_signature(path: str) -> list:
    """[path, size, mtime]: a file that still has the signature it had when checked is taken as
    unchanged (a cut or re-written file changes its size or its mtime)."""
    return [path, os.path.getsize(path), int(os.path.getmtime(path))]


def read_tsv(path: str | os.PathLike, *, skip_bad_lines: bool = False) -> ParallelText:
    """Reads a (dev or test) file of ``source<TAB>target`` lines into memory, by the rules of
    `parse_tsv_lines` (`tfformer.data.tsv_lines`, their Python twin; plain, or gzip when named
    *.gz).

    Raises:
        DataError: on the first bad line (unless skip_bad_lines), for an empty file, and for a
            file with no valid line at all.
        OSError: if the file cannot be read.
    """
    name = os.fspath(path)
    pairs, skipped = read_pairs(name, skip_bad_lines=skip_bad_lines)
    return ParallelText(pairs, name, skipped)

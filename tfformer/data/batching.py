"""Batching: tokenize in the tf.data graph, bucket by length under a token budget.

Two entry points share one batching graph:

* `make_stream` batches an endless stream of (source, target) strings, such as
  `tfformer.data.sources.Corpus.train_pairs`: a bounded shuffle buffer, over-length pairs dropped
  and counted (in a `dropped` variable) as they go by. Nothing is read ahead of the first batch.
* `make_dataset` batches pairs held in memory (dev and test sets, small corpora) and counts them
  exactly beforehand (`PipelineInfo`), so that its finite datasets have a known cardinality.

Tokenizing runs in the graph (tf-text SentencePiece ops, no py_function). Elements are
``((source_ids, target_in_ids), target_out_ids)`` int32 batches bucketed by length under a token
budget (paper §5.1).

Batches come in a small, known set of shapes, so that XLA (TensorFlow's jit_compile, JAX)
compiles each step once per shape, not once per batch: the bucket lengths lie on a fixed
geometric grid (`tfformer.data.buckets`), both sides of a batch are padded with PAD_ID to its
bucket's length, each bucket has a fixed number of rows from the token budget, and a finite
dataset's last, partial batch of a bucket is filled up with rows of PAD only (which the PAD-masked
loss and metrics ignore). `BatchStats` counts the shapes and the padding as the batches go by.

`make_stream(pack_length=N)` and `make_dataset(pack_length=N)` pack instead
(`tfformer.data.packing`): several pairs per row of N tokens, with segment ids, one batch shape.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.buckets import (
    DEFAULT_BUCKET_GROWTH,
    bucket_batch_sizes,
    bucket_lengths,
    rows_per_batch,
)
from tfformer.data.packing import pack_pairs
from tfformer.data.records import Pair, ParallelText
from tfformer.special_tokens import PAD_ID
from tfformer.utils.checks import check_at_least

if TYPE_CHECKING:
    from tfformer.data.tokenizer import Tokenizer

# ---------------------------------------------------------------------------------------------
# tf.data pipeline
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PipelineInfo:
    """What `make_dataset` did with its pairs; log it.

    Attributes:
        num_input_pairs: pairs given.
        num_pairs: pairs kept (each appears once per pass over the data).
        num_dropped: pairs dropped because source + EOS or BOS + target exceeded max_length.
        num_source_tokens: source tokens (EOS included) of the kept pairs.
        num_target_tokens: target tokens (BOS included) of the kept pairs.
        num_batches: batches in one pass without repeat (with repeat, batches cross pass
            boundaries, so a pass takes at most this many steps).
        max_length: the length limit, special token included.
        batch_tokens: the token budget per batch.
        bucket_lengths: the padded length of each bucket (bucket i holds the pairs whose
            longer side has a length in (lengths[i-1], lengths[i]]).
        bucket_batch_sizes: rows of each bucket's batches.
    """

    num_input_pairs: int
    num_pairs: int
    num_dropped: int
    num_source_tokens: int
    num_target_tokens: int
    num_batches: int
    max_length: int
    batch_tokens: int
    bucket_lengths: tuple[int, ...]
    bucket_batch_sizes: tuple[int, ...]


def pair_lengths(pairs: Sequence[Pair], tokenizer: "Tokenizer",
                 chunk_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Model-side lengths of every pair, computed eagerly with the in-graph tokenizer.

    Returns:
        (source lengths with EOS, target lengths with BOS) as int64 arrays; target_in and
        target_out have the same length.
    """
    source_lengths, target_lengths = [], []
    for start in range(0, len(pairs), chunk_size):
        chunk = pairs[start:start + chunk_size]
        # The very encoding the pipeline uses, so that the lengths cannot drift from it.
        source_lengths.append(
            tokenizer.encode_source([s for s, _ in chunk]).row_lengths().numpy())
        target_lengths.append(
            tokenizer.encode_target([t for _, t in chunk])[1].row_lengths().numpy())
    if not source_lengths:
        return np.zeros([0], np.int64), np.zeros([0], np.int64)
    return np.concatenate(source_lengths), np.concatenate(target_lengths)


def make_dataset(pairs: Sequence[Pair] | ParallelText, tokenizer: "Tokenizer", *,
                 batch_tokens: int, max_length: int, shuffle: bool = True, repeat: bool = False,
                 seed: int = 0, shuffle_buffer_size: int = 100_000,
                 batch_multiple: int = 1, bucket_growth: float = DEFAULT_BUCKET_GROWTH,
                 min_bucket_length: int = 8, stats: "BatchStats | None" = None,
                 tokenize_batch_size: int = 256, pack_length: int = 0,
                 fixed_rows: bool = True,
                 cache: bool = False) -> tuple[tf.data.Dataset, PipelineInfo]:
    """Builds the batched training (or evaluation) dataset.

    Elements are ``((source_ids, target_in_ids), target_out_ids)``, int32 [rows, length], with
    source = pieces + [EOS], target_in = [BOS] + pieces, target_out = pieces + [EOS], padded
    with PAD_ID to the length of their bucket.

    Batching (paper §5.1: batches of about N source and N target tokens): pairs are bucketed by
    length = max(source, target) length on the grid of `bucket_lengths`, and a bucket of
    padded length L has batch_tokens // L rows. A sentence is never split across batches; since
    pairs longer than max_length are dropped (and counted) and batch_tokens must be
    >= max_length, every pair fits in a batch. Under tf.distribute the budget is per global
    batch. Without repeat, the last batch of each bucket is filled up with rows of PAD only,
    which carry no tokens for the PAD-masked loss and metrics (they are not counted in
    PipelineInfo): every batch has one of the buckets' shapes. With fixed_rows=False it is
    filled only up to a multiple of batch_multiple.

    Under several devices pass batch_multiple=number of replicas: every bucket's rows are then a
    multiple of it, so each replica's batch has a shape of the same grid (and Keras 3 `fit`
    needs batches that split evenly, keras-team/keras#19246).

    Args:
        pairs: (source, target) strings, or a ParallelText.
        tokenizer: the shared Tokenizer; tokenization runs in the tf.data graph.
        batch_tokens: token budget per batch; must be >= max_length * batch_multiple.
        max_length: longest allowed source + EOS / BOS + target; longer pairs are dropped.
        shuffle: shuffle pairs (seeded) before bucketing, reshuffled on each pass.
        repeat: repeat forever (use with `fit(steps_per_epoch=...)`); batches then cross pass
            boundaries, so no small end-of-pass batches are produced.
        seed: shuffle seed.
        shuffle_buffer_size: at most this many pairs are held in the shuffle buffer.
        batch_multiple: every batch size is a multiple of this (see above).
        bucket_growth: ratio between consecutive bucket lengths (smaller: less padding,
            more shapes).
        min_bucket_length: the first bucket's length.
        stats: counts the batches' shapes and padding as they go by.
        tokenize_batch_size: strings tokenized per tf-text call before unbatching.
        pack_length: 0 buckets by length; else pairs are packed into rows of this many tokens
            (see `make_stream`): pairs longer than it are dropped (and counted), the info's
            bucket_lengths and bucket_batch_sizes are the one row length and rows, and its
            num_batches is counted by packing one pass (exact without shuffle; shuffled, the
            count of one order).
        fixed_rows: fill the last batch of each bucket up to the bucket's rows, so that every
            batch has one of a few shapes: what a compiled step needs (XLA, JAX). A step that
            is not compiled takes any shape; False then spares it the PAD rows, which can be
            most of a small dev set's batches (the built-in dev set, 500 pairs in 14 buckets
            of 4096 tokens: 57,262 token positions with the fill, 5,605 without).
        cache: keep the batches in memory after the first pass, so that a later pass reads them
            from there instead of tokenizing and bucketing again (a set read every epoch);
            needs repeat=False.

    Returns:
        (dataset, info): the prefetched dataset and the counts to log (see PipelineInfo).

    Raises:
        ValueError: on invalid arguments, or if no pair is short enough.
    """
    if isinstance(pairs, ParallelText):
        pairs = pairs.pairs
    if pack_length > max_length:
        raise ValueError(f"pack_length ({pack_length}) must be <= max_length ({max_length})")
    if pack_length:
        rows = rows_per_batch(pack_length, batch_tokens, batch_multiple)
    else:
        _check_budget(batch_tokens, max_length, batch_multiple)
    if not pairs:
        raise ValueError("make_dataset needs at least one pair")
    if cache and repeat:
        raise ValueError("cache needs repeat=False: a repeated dataset never ends its first pass")

    # Count over-length pairs exactly, once, eagerly, with the same tokenizer the graph uses.
    limit, limit_name = (pack_length, "pack_length") if pack_length else (max_length,
                                                                          "max_length")
    source_lengths, target_lengths = pair_lengths(pairs, tokenizer)
    keep = (source_lengths <= limit) & (target_lengths <= limit)
    kept = [pair for pair, k in zip(pairs, keep) if k]
    if not kept:
        raise ValueError(f"all {len(pairs)} pairs are longer than {limit_name}={limit} "
                         f"tokens; raise {limit_name}")

    strings = tf.data.Dataset.from_tensor_slices(
        ([s for s, _ in kept], [t for _, t in kept]))
    if shuffle:
        strings = strings.shuffle(min(len(kept), shuffle_buffer_size), seed=seed,
                                  reshuffle_each_iteration=True)
    if pack_length:
        grid, batch_sizes = [pack_length], [rows]

        packed = functools.partial(_pack_by_length, tokenizer=tokenizer, length=pack_length,
                                   rows=rows, tokenize_batch_size=tokenize_batch_size)
        # How many rows a pass fills is known once it is packed.
        num_batches = int(packed(strings).reduce(
            tf.constant(0, tf.int64), do_not_convert(lambda n, _: n + 1)))
        dataset = packed(strings.repeat() if repeat else strings, stats=stats)
    else:
        grid = bucket_lengths(max_length, min_length=min_bucket_length, growth=bucket_growth)
        batch_sizes = bucket_batch_sizes(grid, batch_tokens, batch_multiple)
        lengths = np.maximum(source_lengths, target_lengths)[keep]
        # The pipeline's bucket rule: bucket i iff grid[i-1] < length <= grid[i].
        bucket_counts = np.bincount(np.searchsorted(grid, lengths, side="left"),
                                    minlength=len(batch_sizes))
        num_batches = int(sum(math.ceil(c / s) for c, s in zip(bucket_counts, batch_sizes)))
        dataset = _batch_by_length(
            strings.repeat() if repeat else strings, tokenizer, grid=grid,
            batch_sizes=batch_sizes, stats=stats, tokenize_batch_size=tokenize_batch_size,
            row_multiple=None if fixed_rows else batch_multiple)
    info = PipelineInfo(
        num_input_pairs=len(pairs), num_pairs=len(kept), num_dropped=len(pairs) - len(kept),
        num_source_tokens=int(source_lengths[keep].sum()),
        num_target_tokens=int(target_lengths[keep].sum()), num_batches=num_batches,
        max_length=max_length, batch_tokens=batch_tokens,
        bucket_lengths=tuple(grid), bucket_batch_sizes=tuple(batch_sizes))
    if not repeat and not (pack_length and shuffle):
        # bucket_by_sequence_length hides the length; the exact count lets Keras size epochs
        # (without it, evaluate warns "Your input ran out of data" on every first pass), and
        # tf.data raises if the count were ever wrong. (Packed, another shuffle fills rows
        # differently: its count is exact only in a fixed order.)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    if cache:
        dataset = dataset.cache()
    return dataset.prefetch(tf.data.AUTOTUNE), info


def _check_budget(batch_tokens: int, max_length: int, batch_multiple: int) -> None:
    check_at_least("max_length", max_length, 2, why="a token plus BOS/EOS")
    check_at_least("batch_multiple", batch_multiple)
    if batch_tokens < max_length * batch_multiple:
        # Otherwise sentences of max_length tokens could not be put in any batch.
        raise ValueError(
            f"batch_tokens ({batch_tokens}) must be >= max_length ({max_length}) * "
            f"batch_multiple ({batch_multiple}) so that every kept sentence fits in a batch")


def _tokenized(strings: tf.data.Dataset, tokenizer: "Tokenizer", *, max_length: int,
               tokenize_batch_size: int, dropped: tf.Variable | None = None) -> tf.data.Dataset:
    """(source, target) strings -> ``((source, target_in), target_out)`` ids; pairs longer than
    max_length are dropped (and counted in `dropped`)."""

    @do_not_convert
    def encode(sources: tf.Tensor, targets: tf.Tensor):
        target_in, target_out = tokenizer.encode_target(targets)
        return (tokenizer.encode_source(sources), target_in), target_out

    # Tokenizing a batch of strings per tf-text call is much cheaper than one call per pair.
    dataset = strings.batch(tokenize_batch_size).map(
        encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    # unbatch() yields rank-1 RaggedTensorSpecs; an identity map turns them into plain
    # tensors, which padded batching requires.
    dataset = dataset.map(do_not_convert(lambda inputs, target: ((inputs[0], inputs[1]), target)))

    @do_not_convert
    def fits(inputs, target):
        ok = _length(inputs, target) <= max_length
        if dropped is not None:
            with tf.control_dependencies([dropped.assign_add(1 - tf.cast(ok, tf.int64))]):
                ok = tf.identity(ok)
        return ok

    return dataset.filter(fits)


@do_not_convert
def _length(inputs, target):
    """A pair's length: its longer side."""
    return tf.maximum(tf.shape(inputs[0])[0], tf.shape(target)[0])


def _batch_by_length(strings: tf.data.Dataset, tokenizer: "Tokenizer", *, grid: Sequence[int],
                     batch_sizes: Sequence[int], tokenize_batch_size: int,
                     dropped: tf.Variable | None = None,
                     stats: "BatchStats | None" = None,
                     row_multiple: int | None = None) -> tf.data.Dataset:
    """(source, target) strings -> batches of the buckets' shapes; pairs longer than the grid's
    last length are dropped (and counted in `dropped`). A bucket's last batch of a finite
    dataset is filled up with PAD rows to the bucket's rows, or with `row_multiple` only to a
    multiple of it."""
    max_length = grid[-1]
    dataset = _tokenized(strings, tokenizer, max_length=max_length,
                         tokenize_batch_size=tokenize_batch_size, dropped=dropped)
    pad = tf.constant(PAD_ID, tf.int32)
    # bucket_by_sequence_length's bucket i holds lengths < boundaries[i] and pads to
    # boundaries[i] - 1; the bucket past the last boundary stays empty (`fits`).
    dataset = dataset.bucket_by_sequence_length(
        _length, bucket_boundaries=[n + 1 for n in grid],
        bucket_batch_sizes=[*batch_sizes, batch_sizes[-1]],
        padded_shapes=(([None], [None]), [None]), padding_values=((pad, pad), pad),
        pad_to_bucket_boundary=True, drop_remainder=False)
    rows_of_length = np.zeros([max_length + 1], np.int32)
    rows_of_length[list(grid)] = batch_sizes
    rows_of_length = tf.constant(rows_of_length)

    @do_not_convert
    def fill_rows(inputs, target):
        rows = tf.shape(target)[0]
        if row_multiple is None:
            extra = tf.gather(rows_of_length, tf.shape(target)[1]) - rows
        else:  # replicas must split a batch evenly (keras-team/keras#19246)
            extra = -rows % row_multiple

        def fill(x):
            x = tf.pad(x, [[0, extra], [0, 0]], constant_values=PAD_ID)
            return tf.ensure_shape(x, [None, None])

        return (fill(inputs[0]), fill(inputs[1])), fill(target)

    if row_multiple != 1:
        dataset = dataset.map(fill_rows)
    if stats is not None:
        dataset = dataset.map(stats.record)
    return dataset


def _pack_by_length(strings: tf.data.Dataset, tokenizer: "Tokenizer", *, length: int,
                    rows: int, tokenize_batch_size: int, dropped: tf.Variable | None = None,
                    stats: "BatchStats | None" = None) -> tf.data.Dataset:
    """(source, target) strings -> packed batches [rows, length] (`tfformer.data.packing`);
    pairs longer than `length` are dropped (and counted in `dropped`)."""
    dataset = pack_pairs(_tokenized(strings, tokenizer, max_length=length,
                                    tokenize_batch_size=tokenize_batch_size, dropped=dropped),
                         length=length, rows=rows)
    return dataset.map(stats.record) if stats is not None else dataset


class BatchStats:
    """The shapes and padding of the batches a pipeline produced, counted in the tf.data graph
    as they go by (a batch read ahead by prefetching counts too).

    `read()` returns {"shapes": {"ROWSxLENGTH": batches}, "batches", "tokens" (real source and
    target tokens), "target_tokens" (real target tokens: what a step's loss counts), "padding"
    (share of PAD in the batches' source and target positions)}.
    """

    def __init__(self):
        self._shapes = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, 0)
        self._tokens = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_tokens")
        self._slots = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_slots")
        self._target_tokens = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name="batch_target_tokens")

    @do_not_convert
    def record(self, inputs, target):
        """A tf.data map function: counts the batch, returns it unchanged."""
        source, target_in = inputs[:2]
        shape = tf.strings.format("{}x{}", (tf.shape(target_in)[0], tf.shape(target_in)[1]))
        real = tf.math.count_nonzero(source != PAD_ID) + tf.math.count_nonzero(
            target_in != PAD_ID)
        slots = tf.cast(tf.size(source) + tf.size(target_in), tf.int64)
        updates = [self._shapes.insert(shape, self._shapes.lookup(shape) + 1),
                   self._tokens.assign_add(real), self._slots.assign_add(slots),
                   self._target_tokens.assign_add(tf.math.count_nonzero(target != PAD_ID))]
        with tf.control_dependencies(updates):
            return tuple(tf.identity(x) for x in inputs), tf.identity(target)

    def read(self) -> dict:
        keys, counts = self._shapes.export()
        shapes = {key.decode(): int(count) for key, count in zip(keys.numpy(), counts.numpy())}
        tokens, slots = int(self._tokens.numpy()), int(self._slots.numpy())
        return {"shapes": dict(sorted(shapes.items(), key=lambda kv: -kv[1])),
                "batches": sum(shapes.values()), "tokens": tokens,
                "target_tokens": int(self._target_tokens.numpy()),
                "padding": 1 - tokens / slots if slots else 0.0}


def make_stream(pairs: tf.data.Dataset, tokenizer: "Tokenizer", *, batch_tokens: int,
                max_length: int, dropped: tf.Variable | None = None, seed: int = 0,
                shuffle_buffer_size: int = 100_000, batch_multiple: int = 1,
                bucket_growth: float = DEFAULT_BUCKET_GROWTH, min_bucket_length: int = 8,
                stats: BatchStats | None = None, tokenize_batch_size: int = 256,
                pack_length: int = 0) -> tf.data.Dataset:
    """Batches an endless stream of (source, target) strings for training.

    The same batches as `make_dataset(repeat=True)` (see there for the token budget and
    batch_multiple), but nothing is counted or read in advance: pairs go through a bounded
    shuffle buffer (files are shuffled by the corpus), and pairs longer than max_length are
    dropped as they come and counted in `dropped`.

    Args:
        pairs: endless (source, target) tf.string elements, e.g. `Corpus.train_pairs(
            repeat=True)`.
        tokenizer: the shared Tokenizer.
        batch_tokens, max_length, batch_multiple, bucket_growth, min_bucket_length,
            stats, tokenize_batch_size: as for `make_dataset`.
        dropped: an int64 variable the dropped pairs are added to (e.g. a run's
            `Counters.dropped`; None: not counted).
        seed: shuffle seed.
        shuffle_buffer_size: pairs held in the shuffle buffer (0: no shuffle).
        pack_length: 0 buckets by length; else pairs are packed into rows of this many tokens
            (`tfformer.data.packing`: one batch shape, [batch_tokens // pack_length rows,
            pack_length], inputs with segment ids), and pairs longer than it are dropped.

    Returns:
        the prefetched dataset of batches.
    """
    if shuffle_buffer_size:
        pairs = pairs.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    if pack_length:
        if pack_length > max_length:
            raise ValueError(f"pack_length ({pack_length}) must be <= max_length ({max_length})")
        dataset = _pack_by_length(
            pairs, tokenizer, length=pack_length,
            rows=rows_per_batch(pack_length, batch_tokens, batch_multiple),
            tokenize_batch_size=tokenize_batch_size, dropped=dropped, stats=stats)
    else:
        _check_budget(batch_tokens, max_length, batch_multiple)
        grid = bucket_lengths(max_length, min_length=min_bucket_length, growth=bucket_growth)
        dataset = _batch_by_length(
            pairs, tokenizer, grid=grid,
            batch_sizes=bucket_batch_sizes(grid, batch_tokens, batch_multiple), stats=stats,
            tokenize_batch_size=tokenize_batch_size, dropped=dropped)
    return dataset.prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(pairs: Sequence[Pair] | ParallelText, tokenizer: "Tokenizer", *,
                      batch_tokens: int, max_length: int,
                      **kwargs) -> tuple[tf.data.Dataset, PipelineInfo]:
    """`make_dataset` for evaluation: no shuffle, no repeat, a deterministic order.

    Each kept pair appears exactly once; over-length pairs are dropped and counted in the info.
    The batches are cached (the pairs are in memory already, and their ids take about as
    much): the next epoch's evaluation starts without building the tokenizing pipeline again.
    """
    return make_dataset(pairs, tokenizer, batch_tokens=batch_tokens, max_length=max_length,
                        shuffle=False, repeat=False, cache=True, **kwargs)

"""The `tf.data` training pipeline: tokenize in the graph, bucket by length under a token budget.

Two entry points share one batching graph:

* `make_stream` batches an endless stream of (source, target) strings, such as
  `tfformer.corpus.Corpus.train_pairs`: a bounded shuffle buffer, over-length pairs dropped and
  counted in `Counters.dropped` as they go by. Nothing is read ahead of the first batch.
* `make_dataset` batches pairs held in memory (dev and test sets, small corpora) and counts them
  exactly beforehand (`PipelineInfo`), so that its finite datasets have a known cardinality.

Tokenizing runs in the graph (tf-text SentencePiece ops, no py_function). Elements are
``((source_ids, target_in_ids), target_out_ids)`` int32 batches bucketed by length under a token
budget (paper §5.1), padded with PAD_ID only to each batch's longest sentence.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np
import tensorflow as tf

from tfformer.corpus import Counters, Pair, ParallelText
from tfformer.special_tokens import PAD_ID

if TYPE_CHECKING:
    from tfformer.tokenizer import Tokenizer

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
        bucket_boundaries: length-bucket boundaries (bucket i holds lengths in
            [boundaries[i-1], boundaries[i])).
        bucket_batch_sizes: batch size of each bucket (one more than the boundaries).
    """

    num_input_pairs: int
    num_pairs: int
    num_dropped: int
    num_source_tokens: int
    num_target_tokens: int
    num_batches: int
    max_length: int
    batch_tokens: int
    bucket_boundaries: tuple[int, ...]
    bucket_batch_sizes: tuple[int, ...]


def bucket_boundaries(max_length: int, *, min_length: int = 8, growth: float = 1.1) -> list[int]:
    """Length-bucket boundaries growing geometrically (dense for short lengths) up to max_length.

    Returns boundaries b with min_length <= b <= max_length; bucket i covers lengths
    [b[i-1], b[i]), the last one [b[-1], max_length].
    """
    if growth <= 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    if min_length < 2:
        raise ValueError(f"min_length must be >= 2, got {min_length}")
    boundaries = []
    length = min_length
    while length <= max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * growth))
    return boundaries


def _bucket_batch_sizes(boundaries: Sequence[int], max_length: int, batch_tokens: int,
                        multiple: int = 1) -> list[int]:
    # Bucket i holds lengths < boundaries[i], so at most boundaries[i] - 1 tokens per row after
    # padding to the batch's longest; the last bucket holds up to max_length.
    longest = [b - 1 for b in boundaries] + [max_length]
    return [batch_tokens // n // multiple * multiple for n in longest]


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
                 batch_multiple: int = 1, bucket_growth: float = 1.1,
                 min_bucket_length: int = 8,
                 tokenize_batch_size: int = 256) -> tuple[tf.data.Dataset, PipelineInfo]:
    """Builds the batched training (or evaluation) dataset.

    Elements are ``((source_ids, target_in_ids), target_out_ids)``, int32 [batch, len], with
    source = pieces + [EOS], target_in = [BOS] + pieces, target_out = pieces + [EOS], padded
    with PAD_ID to the longest sentence of the batch only.

    Batching (paper §5.1: batches of about N source and N target tokens): pairs are bucketed by
    length = max(source, target) length, and each batch satisfies
    batch_size * max(padded source length, padded target length) <= batch_tokens. A sentence
    is never split across batches; since pairs longer than max_length are dropped (and
    counted) and batch_tokens must be >= max_length, every pair fits in a batch. Under
    tf.distribute the budget is per global batch.

    Under `tf.distribute.MirroredStrategy`, pass batch_multiple=num_replicas_in_sync: Keras 3
    `fit`/`evaluate` fail with "Inputs to operation AddN ... must have the same size and shape"
    when the first batch does not split evenly across replicas (keras-team/keras#19246). Then
    every batch size is a multiple of batch_multiple: full batches by construction, the last,
    partial batch of each bucket (repeat=False) by appending rows of PAD only, which carry no
    tokens for the PAD-masked loss and metrics (they are not counted in PipelineInfo).

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
        bucket_growth: ratio between consecutive bucket boundaries (smaller: less padding,
            more buckets).
        min_bucket_length: first bucket boundary.
        tokenize_batch_size: strings tokenized per tf-text call before unbatching.

    Returns:
        (dataset, info): the prefetched dataset and the counts to log (see PipelineInfo).

    Raises:
        ValueError: on invalid arguments, or if no pair is short enough.
    """
    if isinstance(pairs, ParallelText):
        pairs = pairs.pairs
    _check_budget(batch_tokens, max_length, batch_multiple)
    if not pairs:
        raise ValueError("make_dataset needs at least one pair")

    # Count over-length pairs exactly, once, eagerly, with the same tokenizer the graph uses.
    source_lengths, target_lengths = pair_lengths(pairs, tokenizer)
    keep = (source_lengths <= max_length) & (target_lengths <= max_length)
    kept = [pair for pair, k in zip(pairs, keep) if k]
    if not kept:
        raise ValueError(f"all {len(pairs)} pairs are longer than max_length={max_length} "
                         "tokens; raise max_length")

    boundaries = bucket_boundaries(max_length, min_length=min_bucket_length, growth=bucket_growth)
    batch_sizes = _bucket_batch_sizes(boundaries, max_length, batch_tokens, batch_multiple)
    lengths = np.maximum(source_lengths, target_lengths)[keep]
    # Same bucket rule as bucket_by_sequence_length: bucket i iff b[i-1] <= length < b[i].
    bucket_counts = np.bincount(np.searchsorted(boundaries, lengths, side="right"),
                                minlength=len(batch_sizes))
    num_batches = int(sum(math.ceil(c / s) for c, s in zip(bucket_counts, batch_sizes)))
    info = PipelineInfo(
        num_input_pairs=len(pairs), num_pairs=len(kept), num_dropped=len(pairs) - len(kept),
        num_source_tokens=int(source_lengths[keep].sum()),
        num_target_tokens=int(target_lengths[keep].sum()), num_batches=num_batches,
        max_length=max_length, batch_tokens=batch_tokens,
        bucket_boundaries=tuple(boundaries), bucket_batch_sizes=tuple(batch_sizes))

    dataset = tf.data.Dataset.from_tensor_slices(
        ([s for s, _ in kept], [t for _, t in kept]))
    if shuffle:
        dataset = dataset.shuffle(min(len(kept), shuffle_buffer_size), seed=seed,
                                  reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = _batch_by_length(
        dataset, tokenizer, max_length=max_length, boundaries=boundaries,
        batch_sizes=batch_sizes, batch_multiple=batch_multiple if not repeat else 1,
        tokenize_batch_size=tokenize_batch_size)
    if not repeat:
        # bucket_by_sequence_length hides the length; the exact count lets Keras size epochs
        # (without it, evaluate warns "Your input ran out of data" on every first pass), and
        # tf.data raises if the count were ever wrong.
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    return dataset.prefetch(tf.data.AUTOTUNE), info


def _check_budget(batch_tokens: int, max_length: int, batch_multiple: int) -> None:
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2 (a token plus BOS/EOS), got {max_length}")
    if batch_multiple < 1:
        raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}")
    if batch_tokens < max_length * batch_multiple:
        # Otherwise sentences of max_length tokens could not be put in any batch.
        raise ValueError(
            f"batch_tokens ({batch_tokens}) must be >= max_length ({max_length}) * "
            f"batch_multiple ({batch_multiple}) so that every kept sentence fits in a batch")


def _batch_by_length(strings: tf.data.Dataset, tokenizer: "Tokenizer", *, max_length: int,
                     boundaries: Sequence[int], batch_sizes: Sequence[int],
                     batch_multiple: int, tokenize_batch_size: int,
                     dropped: tf.Variable | None = None) -> tf.data.Dataset:
    """(source, target) strings -> token-budget batches; pairs over max_length are dropped
    (and counted in `dropped`). batch_multiple > 1 pads each bucket's partial last batch with
    PAD rows (only a finite dataset has them)."""

    def encode(sources: tf.Tensor, targets: tf.Tensor):
        target_in, target_out = tokenizer.encode_target(targets)
        return (tokenizer.encode_source(sources), target_in), target_out

    # Tokenizing a batch of strings per tf-text call is much cheaper than one call per pair.
    dataset = strings.batch(tokenize_batch_size).map(
        encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    # unbatch() yields rank-1 RaggedTensorSpecs; an identity map turns them into plain
    # tensors, which padded batching requires.
    dataset = dataset.map(lambda inputs, target: ((inputs[0], inputs[1]), target))

    def length(inputs, target):
        return tf.maximum(tf.shape(inputs[0])[0], tf.shape(target)[0])

    def fits(inputs, target):
        ok = length(inputs, target) <= max_length
        if dropped is not None:
            with tf.control_dependencies([dropped.assign_add(1 - tf.cast(ok, tf.int64))]):
                ok = tf.identity(ok)
        return ok

    dataset = dataset.filter(fits)
    pad = tf.constant(PAD_ID, tf.int32)
    dataset = dataset.bucket_by_sequence_length(
        length, bucket_boundaries=boundaries, bucket_batch_sizes=batch_sizes,
        padded_shapes=(([None], [None]), [None]), padding_values=((pad, pad), pad),
        pad_to_bucket_boundary=False, drop_remainder=False)
    if batch_multiple > 1:

        def pad_rows(inputs, target):
            extra = tf.math.floormod(-tf.shape(target)[0], batch_multiple)

            def pad_batch(x):
                return tf.pad(x, [[0, extra], [0, 0]], constant_values=PAD_ID)

            return (pad_batch(inputs[0]), pad_batch(inputs[1])), pad_batch(target)

        dataset = dataset.map(pad_rows)
    return dataset


def make_stream(pairs: tf.data.Dataset, tokenizer: "Tokenizer", *, batch_tokens: int,
                max_length: int, counters: Counters | None = None, seed: int = 0,
                shuffle_buffer_size: int = 100_000, batch_multiple: int = 1,
                bucket_growth: float = 1.1, min_bucket_length: int = 8,
                tokenize_batch_size: int = 256) -> tf.data.Dataset:
    """Batches an endless stream of (source, target) strings for training.

    The same batches as `make_dataset(repeat=True)` (see there for the token budget and
    batch_multiple), but nothing is counted or read in advance: pairs go through a bounded
    shuffle buffer (files are shuffled by the corpus), and pairs longer than max_length are
    dropped as they come and counted in `counters.dropped`.

    Args:
        pairs: endless (source, target) tf.string elements, e.g. `Corpus.train_pairs(
            repeat=True)`.
        tokenizer: the shared Tokenizer.
        batch_tokens, max_length, batch_multiple, bucket_growth, min_bucket_length,
            tokenize_batch_size: as for `make_dataset`.
        counters: where dropped pairs are counted (None: not counted).
        seed: shuffle seed.
        shuffle_buffer_size: pairs held in the shuffle buffer (0: no shuffle).

    Returns:
        the prefetched dataset of batches.
    """
    _check_budget(batch_tokens, max_length, batch_multiple)
    boundaries = bucket_boundaries(max_length, min_length=min_bucket_length, growth=bucket_growth)
    batch_sizes = _bucket_batch_sizes(boundaries, max_length, batch_tokens, batch_multiple)
    if shuffle_buffer_size:
        pairs = pairs.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    dataset = _batch_by_length(
        pairs, tokenizer, max_length=max_length, boundaries=boundaries, batch_sizes=batch_sizes,
        batch_multiple=1, tokenize_batch_size=tokenize_batch_size,
        dropped=counters.dropped if counters is not None else None)
    return dataset.prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(pairs: Sequence[Pair] | ParallelText, tokenizer: "Tokenizer", *,
                      batch_tokens: int, max_length: int,
                      **kwargs) -> tuple[tf.data.Dataset, PipelineInfo]:
    """`make_dataset` for evaluation: no shuffle, no repeat, a deterministic order.

    Each kept pair appears exactly once; over-length pairs are dropped and counted in the info.
    """
    return make_dataset(pairs, tokenizer, batch_tokens=batch_tokens, max_length=max_length,
                        shuffle=False, repeat=False, **kwargs)

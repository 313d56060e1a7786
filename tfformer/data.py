"""Parallel text readers and the `tf.data` training pipeline.

Readers return a `ParallelText`: the (source, target) string pairs plus what was skipped, so the
program can log it. Bad data raises `DataError` naming the file and the 1-based line number,
unless `skip_bad_lines=True`, in which case the bad lines are skipped and listed. Nothing is
dropped silently: over-length pairs are counted by `make_dataset` in its `PipelineInfo`.

`load_data(spec)` parses a data spec (what `tfformer-train --data` takes):

* ``builtin`` or ``builtin:N`` – the synthetic Spanish→English corpus (`tfformer.builtin_corpus`);
* ``tsv:TRAIN[,DEV]`` – UTF-8 files of ``source<TAB>target`` lines;
* ``tfds:NAME`` – a TensorFlow Datasets translation set, e.g. ``ted_hrlr_translate/pt_to_en``.

`make_dataset` tokenizes in graph (tf-text SentencePiece ops, no py_function) and yields
``((source_ids, target_in_ids), target_out_ids)`` int32 batches bucketed by length under a token
budget (paper §5.1), padded with PAD_ID only to each batch's longest sentence.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
from typing import TYPE_CHECKING, Sequence

import numpy as np
import tensorflow as tf

from tfformer import builtin_corpus
from tfformer.special_tokens import PAD_ID

if TYPE_CHECKING:
    from tfformer.tokenizer import Tokenizer

Pair = tuple[str, str]

# Held-out dev set for `tsv:TRAIN` without DEV: this fraction of train, at most this many pairs.
HOLDOUT_FRACTION = 0.01
MAX_HOLDOUT = 1000
# TFDS split used as dev for `tfds:NAME` (newstest2013 for wmt14_translate).
TFDS_DEV_SPLIT = "validation"


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


@dataclasses.dataclass(frozen=True)
class ParallelText:
    """Sentence pairs read from one source.

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


def _check_pair(source: str, target: str) -> tuple[Pair | None, str | None]:
    """Returns ((source, target) stripped, None) or (None, reason)."""
    source, target = source.strip(), target.strip()
    if not source and not target:
        return None, "empty source and target sides"
    if not source:
        return None, "empty source side"
    if not target:
        return None, "empty target side"
    return (source, target), None


def read_tsv(path: str | os.PathLike, *, skip_bad_lines: bool = False) -> ParallelText:
    """Reads ``source<TAB>target`` lines (UTF-8, no header; a BOM and CRLF endings are accepted).

    A line is bad if it is not valid UTF-8, has no TAB or more than one, or has an empty side
    after stripping whitespace (an empty line is bad too).

    Args:
        path: the file.
        skip_bad_lines: skip bad lines and list them in `ParallelText.skipped` instead of raising.

    Returns:
        the pairs, in file order.

    Raises:
        DataError: on the first bad line (unless skip_bad_lines), for an empty file, and for a
            file with no valid line at all.
        OSError: if the file cannot be read.
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read()
    if not data.strip():
        raise DataError(name, None, "empty file")
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the newline ending the last line does not start another line
        lines.pop()
    pairs: list[Pair] = []
    skipped: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        reason = None
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            reason = f"invalid UTF-8 at byte {error.start}"
        else:
            tabs = line.count("\t")
            if not line.strip():
                reason = "empty line"
            elif tabs == 0:
                reason = "no TAB separator"
            elif tabs > 1:
                reason = f"{tabs} TAB separators, expected exactly 1"
            else:
                pair, reason = _check_pair(*line.split("\t"))
                if pair is not None:
                    pairs.append(pair)
        if reason is not None:
            if not skip_bad_lines:
                raise DataError(name, number, reason)
            skipped.append((number, reason))
    if not pairs:
        raise DataError(name, None, f"no valid line ({len(skipped)} bad lines skipped)")
    return ParallelText(pairs, name, skipped)


def read_tfds(name: str, split: str = "train", *, skip_bad_lines: bool = False,
              data_dir: str | None = None) -> ParallelText:
    """Reads a TensorFlow Datasets translation set as (source, target) pairs.

    The source is the first supervised key: ``ted_hrlr_translate/pt_to_en`` gives (pt, en),
    ``wmt14_translate/de-en`` gives (de, en).

    Args:
        name: the TFDS name with config, e.g. "ted_hrlr_translate/pt_to_en".
        split: a TFDS split, e.g. "train" or "validation".
        skip_bad_lines: skip examples with an empty side or invalid UTF-8 instead of raising.
        data_dir: TFDS data directory (default: TFDS's own default).

    Returns:
        the pairs; line numbers in errors and `skipped` are 1-based example numbers.

    Raises:
        ImportError: if tensorflow-datasets is not installed.
        DataError: on a bad example (unless skip_bad_lines) or an empty split.
    """
    try:
        import tensorflow_datasets as tfds  # lazy: a large optional dependency
    except ImportError:
        raise ImportError(
            f"reading tfds:{name} needs TensorFlow Datasets: pip install tensorflow-datasets"
        ) from None
    where = f"tfds:{name}[{split}]"
    dataset = tfds.load(name, split=split, as_supervised=True, data_dir=data_dir)
    pairs: list[Pair] = []
    skipped: list[tuple[int, str]] = []
    for number, (source, target) in enumerate(tfds.as_numpy(dataset), start=1):
        try:
            pair, reason = _check_pair(source.decode("utf-8"), target.decode("utf-8"))
        except UnicodeDecodeError as error:
            pair, reason = None, f"invalid UTF-8 at byte {error.start}"
        if pair is not None:
            pairs.append(pair)
        elif skip_bad_lines:
            skipped.append((number, reason))
        else:
            raise DataError(where, number, reason)
    if not pairs:
        raise DataError(where, None, f"no valid example ({len(skipped)} bad examples skipped)")
    return ParallelText(pairs, where, skipped)


def read_builtin(split: str = "train", n: int | None = None, seed: int = 0) -> ParallelText:
    """The built-in synthetic Spanish→English corpus (see `tfformer.builtin_corpus`)."""
    return ParallelText(builtin_corpus.builtin_pairs(split, n, seed), f"builtin:{split}")


@dataclasses.dataclass(frozen=True)
class DataSplits:
    """Train and dev pairs for one data spec.

    Attributes:
        train: training pairs.
        dev: dev pairs.
        spec: the spec they were loaded from.
        dev_held_out: True if dev was held out of the training file (no DEV given).
        notes: human-readable facts worth logging (held-out dev, skipped lines).
    """

    train: ParallelText
    dev: ParallelText
    spec: str
    dev_held_out: bool = False
    notes: tuple[str, ...] = ()


def hold_out(text: ParallelText, *, fraction: float = HOLDOUT_FRACTION,
             max_pairs: int = MAX_HOLDOUT, seed: int = 0) -> tuple[ParallelText, ParallelText]:
    """Splits a deterministic random sample off `text` as a dev set.

    Args:
        text: the pairs to split.
        fraction: share of pairs held out (rounded, at least 1).
        max_pairs: upper bound on the held-out pairs.
        seed: seed of the sample.

    Returns:
        (train without the held-out pairs, held-out pairs), both in original order.

    Raises:
        DataError: if `text` has fewer than 2 pairs.
    """
    if len(text.pairs) < 2:
        raise DataError(text.path, None, "need at least 2 pairs to hold out a dev set")
    count = min(max_pairs, max(1, round(len(text.pairs) * fraction)), len(text.pairs) - 1)
    # A random sample, not the file's tail: files are often ordered (e.g. by document).
    chosen = set(random.Random(seed).sample(range(len(text.pairs)), count))
    train = [p for i, p in enumerate(text.pairs) if i not in chosen]
    dev = [p for i, p in enumerate(text.pairs) if i in chosen]
    return (ParallelText(train, text.path, text.skipped),
            ParallelText(dev, f"{text.path} (held out)"))


def load_data(spec: str, *, skip_bad_lines: bool = False, seed: int = 0) -> DataSplits:
    """Loads train and dev pairs for a data spec.

    Args:
        spec: "builtin" or "builtin:N_TRAIN" (synthetic corpus, its own dev split);
            "tsv:TRAIN[,DEV]" (without DEV, a seeded sample of 1% of TRAIN, at most 1000
            pairs, is held out as dev); "tfds:NAME" (splits "train" and "validation");
            "reverse:SPEC" swaps source and target of SPEC (e.g. WMT14 EN->DE from
            "reverse:tfds:wmt14_translate/de-en", whose supervised keys are (de, en)).
        skip_bad_lines: skip (and list) bad lines instead of raising.
        seed: seed of the built-in corpus and of the held-out dev sample.

    Returns:
        the DataSplits.

    Raises:
        ValueError: for a malformed spec; DataError for bad data; ImportError (tfds missing).
    """
    kind, _, rest = spec.partition(":")
    if kind == "reverse":
        splits = load_data(rest, skip_bad_lines=skip_bad_lines, seed=seed)
        swap = [ParallelText([(t, s) for s, t in text.pairs], text.path, text.skipped)
                for text in (splits.train, splits.dev)]
        return dataclasses.replace(splits, train=swap[0], dev=swap[1], spec=spec,
                                   notes=[*splits.notes, "source and target swapped"])
    notes: list[str] = []
    if kind == "builtin":
        n_train = None
        if rest:
            try:
                n_train = int(rest)
            except ValueError:
                n_train = -1
            if n_train < 1:
                raise ValueError(f"data spec {spec!r}: N in builtin:N must be a positive integer")
        train = read_builtin("train", n_train, seed)
        dev = read_builtin("dev", None, seed)
        return DataSplits(train, dev, spec)
    if kind == "tsv":
        paths = rest.split(",") if rest else []
        if not 1 <= len(paths) <= 2 or not all(paths):
            raise ValueError(f"data spec {spec!r}: expected tsv:TRAIN or tsv:TRAIN,DEV")
        train = read_tsv(paths[0], skip_bad_lines=skip_bad_lines)
        held_out = len(paths) == 1
        if held_out:
            train, dev = hold_out(train, seed=seed)
            notes.append(f"dev: {len(dev)} pairs held out of {paths[0]} "
                         f"({HOLDOUT_FRACTION:.0%} of it, at most {MAX_HOLDOUT}, seed {seed})")
        else:
            dev = read_tsv(paths[1], skip_bad_lines=skip_bad_lines)
    elif kind == "tfds":
        if not rest:
            raise ValueError(
                f"data spec {spec!r}: expected tfds:NAME, e.g. tfds:ted_hrlr_translate/pt_to_en")
        train = read_tfds(rest, "train", skip_bad_lines=skip_bad_lines)
        dev = read_tfds(rest, TFDS_DEV_SPLIT, skip_bad_lines=skip_bad_lines)
        held_out = False
    else:
        raise ValueError(
            f"data spec {spec!r}: expected builtin[:N], tsv:TRAIN[,DEV] or tfds:NAME")
    for text in (train, dev):
        if text.skipped:
            first = ", ".join(f"line {n}: {r}" for n, r in text.skipped[:3])
            notes.append(f"{text.path}: skipped {text.num_skipped} bad lines ({first}"
                         f"{', ...' if text.num_skipped > 3 else ''})")
    return DataSplits(train, dev, spec, held_out, tuple(notes))


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
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2 (a token plus BOS/EOS), got {max_length}")
    if batch_multiple < 1:
        raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}")
    if batch_tokens < max_length * batch_multiple:
        # Otherwise sentences of max_length tokens could not be put in any batch.
        raise ValueError(
            f"batch_tokens ({batch_tokens}) must be >= max_length ({max_length}) * "
            f"batch_multiple ({batch_multiple}) so that every kept sentence fits in a batch")
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

    def encode(sources: tf.Tensor, targets: tf.Tensor):
        target_in, target_out = tokenizer.encode_target(targets)
        return (tokenizer.encode_source(sources), target_in), target_out

    # Tokenizing a batch of strings per tf-text call is much cheaper than one call per pair.
    dataset = dataset.batch(tokenize_batch_size).map(
        encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    # unbatch() yields rank-1 RaggedTensorSpecs; an identity map turns them into plain
    # tensors, which padded batching requires.
    dataset = dataset.map(lambda inputs, target: ((inputs[0], inputs[1]), target))

    def length(inputs, target):
        return tf.maximum(tf.shape(inputs[0])[0], tf.shape(target)[0])

    pad = tf.constant(PAD_ID, tf.int32)
    dataset = dataset.bucket_by_sequence_length(
        length, bucket_boundaries=boundaries, bucket_batch_sizes=batch_sizes,
        padded_shapes=(([None], [None]), [None]), padding_values=((pad, pad), pad),
        pad_to_bucket_boundary=False, drop_remainder=False)
    if batch_multiple > 1 and not repeat:  # with repeat, only full batches are emitted

        def pad_rows(inputs, target):
            extra = tf.math.floormod(-tf.shape(target)[0], batch_multiple)
            def pad_batch(x):
                return tf.pad(x, [[0, extra], [0, 0]], constant_values=PAD_ID)

            return (pad_batch(inputs[0]), pad_batch(inputs[1])), pad_batch(target)

        dataset = dataset.map(pad_rows)
    if not repeat:
        # bucket_by_sequence_length hides the length; the exact count lets Keras size epochs
        # (without it, evaluate warns "Your input ran out of data" on every first pass), and
        # tf.data raises if the count were ever wrong.
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    return dataset.prefetch(tf.data.AUTOTUNE), info


def make_eval_dataset(pairs: Sequence[Pair] | ParallelText, tokenizer: "Tokenizer", *,
                      batch_tokens: int, max_length: int,
                      **kwargs) -> tuple[tf.data.Dataset, PipelineInfo]:
    """`make_dataset` for evaluation: no shuffle, no repeat, a deterministic order.

    Each kept pair appears exactly once; over-length pairs are dropped and counted in the info.
    """
    return make_dataset(pairs, tokenizer, batch_tokens=batch_tokens, max_length=max_length,
                        shuffle=False, repeat=False, **kwargs)

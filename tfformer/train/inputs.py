"""What one run trains and validates on: the one scan, the vocabulary, the dev set, the batches.

`prepare` gets a run's corpus, vocabulary and dev set; `assemble` turns them into the run's
training stream, dev batches and the counts it logs (`RunBatches`).

On a new run the chief reads the training side once (`tfformer.data.scan`): it fails on the
first bad line before any training, counts the pairs, keeps the held-out dev pairs in
``RUN/dev.tsv`` and trains the vocabulary on a bounded sample. What it found goes to
``RUN/data.json``, which also caches the batches per pass that `--epochs` needs, so that count is
made once per run. A resumed run or another worker reads these files and never scans again.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from typing import Callable

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.batching import BatchStats, make_eval_dataset, make_stream
from tfformer.data.buckets import DEFAULT_BUCKET_GROWTH
from tfformer.data.records import ParallelText
from tfformer.data.scan import scan
from tfformer.data.sources import Corpus, open_corpus
from tfformer.data.tokenizer import Tokenizer, load_tokenizer
from tfformer.data.tsv import file_signature, read_tsv
from tfformer.utils.files import atomic_write_text, wait_for_file
from tfformer.utils.run_dir import RunDir, read_data_stats, write_data_stats

logger = logging.getLogger(__name__)


def _file_signature(corpus: Corpus) -> list:
    if corpus.kind != "tsv":
        return [corpus.spec]
    return [file_signature(path) for path in corpus.files]


@dataclasses.dataclass
class RunData:
    """A run's corpus, vocabulary and dev set."""

    corpus: Corpus
    tokenizer: Tokenizer
    dev: ParallelText


def prepare(run: RunDir, *, chief: bool, spec: str, skip_bad_lines: bool, seed: int,
            vocab_size: int, vocab_sample: int) -> RunData:
    """Opens the corpus that the data spec `spec` names and gets the run's vocabulary and dev
    set: from the run directory when it has them, else (chief only) by scanning the training
    side once. Other workers wait for the chief's files.

    Raises:
        DataError: a bad line (unless skip_bad_lines), a missing or empty file.
        ValueError: a malformed data spec, or a run directory started on other data.
    """
    stats = read_data_stats(run)
    # The files the run's scan read were checked whole when it opened them.
    corpus = open_corpus(spec, skip_bad_lines=skip_bad_lines, seed=seed,
                         checked=stats.get("files", ()))
    started_on = stats.get("spec")
    if started_on is not None and started_on != corpus.spec and run.has_tokenizer():
        # Resuming would keep the other data's vocabulary and dev set.
        raise ValueError(f"{run.path} is a run on data {started_on!r}, not {corpus.spec!r}: "
                         "give a new run directory, or the same data to resume it")
    held_out = corpus.holds_out_dev
    if not chief:
        # The chief writes data.json after dev.tsv, then trains the vocabulary (a fine-tuned
        # run has its starting point's before either).
        wait_for_file(run.data_stats, timeout=600)
        wait_for_file(run.tokenizer_files[-1], timeout=600)
        stats = read_data_stats(run)
    elif not run.has_tokenizer() or "spec" not in stats or (
            held_out and "holdout_threshold" not in stats):
        started = time.monotonic()
        os.makedirs(run.path, exist_ok=True)  # the vocabulary sample's file goes there
        found = scan(corpus, skip_bad_lines=skip_bad_lines, sample_sentences=vocab_sample,
                     seed=seed, sample_dir=run.path)
        seconds = time.monotonic() - started
        logger.info("data: %s: %d training pairs%s%s, read in %.1f s", corpus.spec,
                    found.num_pairs, f", {found.num_bad} bad line(s) skipped"
                    if found.num_bad else "",
                    f", {found.num_held_out} held out" if held_out else "", seconds)
        for where, reason in found.bad_lines:
            logger.warning("data: skipped %s: %s", where, reason)
        if found.dev is not None:
            atomic_write_text(run.held_out_dev, "".join(
                f"{source}\t{target}\n" for source, target in found.dev.pairs))
            logger.info("dev: %d held-out pairs, kept in %s", len(found.dev), run.held_out_dev)
        stats = {**stats, "spec": corpus.spec, "files": _file_signature(corpus),
                 "pairs": found.num_pairs, "bad_lines": found.num_bad,
                 "held_out": found.num_held_out, "holdout_threshold": found.holdout_threshold,
                 "scan_seconds": round(seconds, 1)}
        write_data_stats(run, stats)
        if not run.has_tokenizer():  # a fine-tuned run has its starting point's
            # §5.1: one vocabulary shared by source and target, learned from both sides.
            started = time.monotonic()
            tokenizer = Tokenizer.train(found.sample, vocab_size, seed=seed)
            tokenizer.save(run.tokenizer)
            logger.info("tokenizer: trained %d ids (asked for %d) on %d sampled sentences in "
                        "%.1f s, saved %s", tokenizer.vocab_size, vocab_size, len(found.sample),
                        time.monotonic() - started, run.tokenizer)
    if held_out:
        corpus = dataclasses.replace(corpus, holdout_threshold=stats["holdout_threshold"])
    tokenizer = load_tokenizer(run)
    dev = corpus.dev if not held_out else read_tsv(run.held_out_dev)
    logger.info("data: dev: %d pairs from %s", len(dev), dev.path)
    return RunData(corpus, tokenizer, dev)


class Counters:
    """Running counts of a run's training stream, kept in tf.Variables the pipeline increments.

    Each stage counts in its own variable (`Corpus.train_pairs` the bad lines it skips,
    `make_stream` the over-length pairs it drops); the run keeps the two together because
    `LogDataCounters` logs both after each epoch.

    Attributes:
        skipped: bad lines skipped (with skip_bad_lines).
        dropped: pairs dropped as longer than max_length.
    """

    def __init__(self):
        self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_lines")
        self.dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name="dropped_pairs")

    def read(self) -> dict[str, int]:
        return {"skipped": int(self.skipped.numpy()), "dropped": int(self.dropped.numpy())}


def training_batches(data: RunData, trained_batches: int = 0, *, batch_tokens: int,
                     max_length: int, seed: int, skip_bad_lines: bool = False,
                     batch_multiple: int = 1,
                     bucket_growth: float = DEFAULT_BUCKET_GROWTH, pack_length: int = 0,
                     num_workers: int = 1, worker_index: int = 0,
                     shuffle_buffer_size: int = 100_000,
                     counters: Counters | None = None,
                     stats: BatchStats | None = None) -> tf.data.Dataset:
    """The endless training batches of this worker: its shard of the files (or lines),
    shuffled by file and in a bounded buffer, tokenized and bucketed in the graph into the
    shapes of the bucket grid, or packed into rows of `pack_length` (counted in `stats`).

    The order depends on `seed` alone. A resumed run passes the `trained_batches` it trained
    on: they are read again and skipped, not trained on, so the run goes on where it stopped
    (`stats` and `counters` count them too). Build the stream anew for each start: a second
    iterator of the same dataset would see another shuffle.
    """
    skipped = counters.skipped if counters is not None else None
    dropped = counters.dropped if counters is not None else None
    pairs = data.corpus.train_pairs(
        skip_bad_lines=skip_bad_lines, skipped=skipped, shuffle_files=True, seed=seed,
        repeat=True, num_shards=num_workers, shard_index=worker_index)
    batches = make_stream(pairs, data.tokenizer, batch_tokens=batch_tokens,
                          max_length=max_length, dropped=dropped, seed=seed,
                          shuffle_buffer_size=shuffle_buffer_size,
                          batch_multiple=batch_multiple, bucket_growth=bucket_growth,
                          stats=stats, pack_length=pack_length)
    if num_workers > 1:
        # Each worker reads its own shard already: tf.distribute must not shard it again.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        batches = batches.with_options(options)
    if trained_batches:
        logger.info("data: skipping the %d batch(es) trained on before this resume",
                    trained_batches)
        batches = batches.skip(trained_batches)
    return batches


def batches_per_pass(run: RunDir, data: RunData, *, batch_tokens: int, max_length: int,
                     skip_bad_lines: bool, batch_multiple: int,
                     bucket_growth: float = DEFAULT_BUCKET_GROWTH, pack_length: int = 0,
                     write_cache: bool = True) -> int:
    """Batches in one pass over the training side (what `--epochs` counts in), counted once by
    running the pipeline over the data and cached in RUN/data.json (by the chief only:
    `write_cache`)."""
    key = f"batch_tokens={batch_tokens},max_length={max_length},multiple={batch_multiple}," \
          f"vocab={data.tokenizer.vocab_size}"
    # The default growth adds nothing to the key, so counts cached without a growth field
    # still match.
    if bucket_growth != DEFAULT_BUCKET_GROWTH:
        key += f",growth={bucket_growth}"
    if pack_length:
        key += f",pack={pack_length}"
    stats = read_data_stats(run)
    signature = _file_signature(data.corpus)
    cached = stats.get("batches_per_pass", {})
    if stats.get("files") == signature and key in cached:
        return cached[key]
    started = time.monotonic()
    batches = make_stream(
        data.corpus.train_pairs(skip_bad_lines=skip_bad_lines), data.tokenizer,
        batch_tokens=batch_tokens, max_length=max_length, shuffle_buffer_size=0,
        batch_multiple=batch_multiple, bucket_growth=bucket_growth, pack_length=pack_length)
    count = int(batches.reduce(tf.constant(0, tf.int64), do_not_convert(lambda n, _: n + 1)))
    logger.info("data: one pass is %d batches (counted in %.1f s, cached in %s)", count,
                time.monotonic() - started, run.data_stats)
    if not write_cache:
        return count
    if stats.get("files") != signature:
        stats = {"files": signature}
    write_data_stats(run, {**stats, "batches_per_pass": {**stats.get("batches_per_pass", {}),
                                                     key: count}})
    return count


@dataclasses.dataclass
class RunBatches:
    """What one run trains and validates on, as batches (`assemble`).

    Attributes:
        train: the number of batches already trained on -> the endless training batches from
            there on (`training_batches`; `tfformer.train.fit.fit_resumable` calls it on each
            start).
        dev: the dev set's batches, in a fixed order, each pair once.
        batches_per_pass: () -> the batches in one pass over the training side (what
            `--epochs` counts in; see `batches_per_pass`): call it only where needed, a count
            not cached yet runs over the whole training side.
        counters: the bad lines the training stream skipped and the pairs it dropped.
        stats: the training batches' shapes and padding.
    """

    train: Callable[[int], tf.data.Dataset]
    dev: tf.data.Dataset
    batches_per_pass: Callable[[], int]
    counters: Counters
    stats: BatchStats


def assemble(run: RunDir, data: RunData, *, batch_tokens: int, max_length: int, seed: int,
             skip_bad_lines: bool, batch_multiple: int, bucket_growth: float,
             pack_length: int = 0, num_workers: int = 1, worker_index: int = 0,
             shuffle_buffer_size: int = 100_000, write_cache: bool = True,
             fixed_rows: bool = True) -> RunBatches:
    """The batches one worker of a run trains and validates on, on one bucket grid.

    Args:
        run: the (shared) run directory, where the batches per pass are cached.
        data: what `prepare` got.
        batch_tokens, max_length, batch_multiple, bucket_growth: the batches' shapes (see
            `tfformer.data.batching.make_dataset`); batch_multiple: the replicas.
        pack_length: rows packed with several pairs (0: bucketed; see
            `tfformer.data.batching.make_stream`), for the training stream and the dev batches
            alike (one shape: each step compiles once).
        seed: the training stream's order, the same on every start.
        skip_bad_lines: skip and count bad training lines instead of failing.
        num_workers, worker_index: this worker's shard of the training side.
        shuffle_buffer_size: pairs in the training stream's shuffle buffer.
        write_cache: keep the count of batches per pass in RUN/data.json (the chief does).
        fixed_rows: the dev batches all of the grid's shapes, as a compiled step needs (see
            `tfformer.data.batching.make_dataset`).
    """
    counters, stats = Counters(), BatchStats()
    # The same seed on every start, the batches trained on skipped: a resumed run goes on with
    # the data order where it stopped.
    train = functools.partial(
        training_batches, data, batch_tokens=batch_tokens, max_length=max_length, seed=seed,
        skip_bad_lines=skip_bad_lines, batch_multiple=batch_multiple,
        bucket_growth=bucket_growth, pack_length=pack_length, num_workers=num_workers,
        worker_index=worker_index, shuffle_buffer_size=shuffle_buffer_size, counters=counters,
        stats=stats)
    if num_workers > 1:
        logger.info("train: worker %d reads shard %d of %d (by %s)", worker_index,
                    worker_index, num_workers, data.corpus.shard_unit(num_workers))
    dev, dev_info = make_eval_dataset(
        data.dev, data.tokenizer, batch_tokens=batch_tokens, max_length=max_length,
        batch_multiple=batch_multiple, bucket_growth=bucket_growth, pack_length=pack_length,
        fixed_rows=fixed_rows)
    if dev_info.num_dropped:
        logger.info("dev: %d pairs dropped as longer than %d tokens", dev_info.num_dropped,
                    pack_length or max_length)
    per_pass = functools.partial(
        batches_per_pass, run, data, batch_tokens=batch_tokens, max_length=max_length,
        skip_bad_lines=skip_bad_lines, batch_multiple=batch_multiple,
        bucket_growth=bucket_growth, pack_length=pack_length, write_cache=write_cache)
    return RunBatches(train, dev, per_pass, counters, stats)



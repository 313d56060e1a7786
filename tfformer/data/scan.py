"""The one ordered pass over a corpus's training side: counts, the held-out dev set, and the
bounded random sample the vocabulary is trained on.

`scan` reads the training side once, in order, before any training: it reports the first bad
line, counts the pairs, collects the held-out dev pairs (when the data spec names no DEV file)
and draws the sample the vocabulary learns from (§5.1), so that neither the time nor the memory
of the vocabulary grows with the corpus.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Sequence

import numpy as np
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.records import DataError, ParallelText, checked_batches, utf8_strings
from tfformer.data.sources import Corpus, holdout_key
from tfformer.utils.checks import check_at_least

HOLDOUT_FRACTION = 0.01  # of TRAIN held out as dev when no DEV file is given...
MAX_HOLDOUT = 1000  # ...but at most this many pairs (and at least one)


@dataclasses.dataclass(frozen=True)
class Scan:
    """What one ordered pass over the training side found.

    Attributes:
        num_pairs: good training pairs (held-out ones not included).
        num_bad: bad lines skipped.
        bad_lines: ("FILE:LINE", reason) of the first bad lines skipped (at most 20).
        sample: the vocabulary sample: sentences of a uniform random sample of the good pairs
            (both sides), at most `sample_sentences`, read from disk as they are read.
        dev: the held-out dev pairs, or None (DEV given).
        holdout_threshold: the `holdout_key` bound of the held-out pairs (see Corpus), or None.
        num_held_out: pairs held out of training (duplicates of dev pairs included).
    """

    num_pairs: int
    num_bad: int
    bad_lines: list[tuple[str, str]]
    sample: SentenceSample
    dev: ParallelText | None
    holdout_threshold: int | None
    num_held_out: int


class _BottomK:
    """The k items with the smallest keys seen so far, in O(k) memory (bottom-k sampling).

    An item is a key and one value in each of the columns (NumPy arrays of equal length).
    Offers go to a pending buffer, compacted to the k smallest once it holds k/16 more items, so
    each item costs O(1) amortized and at most ~1.06 k items are held; once k items are kept,
    only keys below the k-th smallest kept key can still enter, and they are the only ones
    buffered.
    """

    def __init__(self, k: int, num_columns: int):
        self.k = k
        self.keys = np.zeros([0])
        self.columns = [np.zeros([0]) for _ in range(num_columns)]  # dtypes: the first offer's
        self._empty = True
        self._pending: list[tuple[np.ndarray, ...]] = []
        self._pending_size = 0
        self._bound = None  # the k-th smallest kept key, once k are kept

    def candidates(self, keys: np.ndarray) -> np.ndarray:
        """Which of `keys` can still enter (all, until k items are kept)."""
        if self._bound is None:
            return np.ones(len(keys), bool)
        return keys < self._bound

    def offer(self, keys: np.ndarray, *columns: np.ndarray) -> None:
        entering = self.candidates(keys)
        if entering.any():
            self._pending.append((keys[entering], *(c[entering] for c in columns)))
            self._pending_size += int(entering.sum())
            if self._pending_size >= max(1, self.k // 16):
                self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        fields = [list(arrays) for arrays in zip(*self._pending)]
        if not self._empty:
            fields = [[kept, *arrays] for kept, arrays in zip([self.keys, *self.columns], fields)]
        self.keys, *self.columns = (np.concatenate(arrays) for arrays in fields)
        self._pending, self._pending_size, self._empty = [], 0, False
        if len(self.keys) > self.k:
            chosen = np.argpartition(self.keys, self.k - 1)[:self.k]
            self.keys = self.keys[chosen]
            self.columns = [column[chosen] for column in self.columns]
        if len(self.keys) >= self.k:
            self._bound = self.keys.max()

    def sorted(self) -> tuple[np.ndarray, ...]:
        """The keys and each column, in key order."""
        self._compact()
        order = np.argsort(self.keys, kind="stable")
        return (self.keys[order], *(column[order] for column in self.columns))


class SentenceSample(Sequence[str]):
    """The vocabulary sample: sentences (source, target, source, ...) of the pairs with the
    smallest keys, in key order, read back from a temporary file one pair at a time.

    Its pairs go to disk as they enter, and only their keys and places stay in memory: a million
    sentences held as Python objects would double the scan's memory; on disk the text costs
    ~25 bytes of memory a pair (its key and place). The
    file is unlinked from the start, so nothing is left behind, even after a kill.
    """

    def __init__(self, pairs: int, directory: str | None = None):
        self._file = tempfile.TemporaryFile(dir=directory)
        self._end = 0
        self._chosen = _BottomK(pairs, 3)  # columns: offset, source bytes, target bytes
        self._places: tuple[np.ndarray, ...] = ()
        self._size = 0

    def offer(self, keys: np.ndarray, sources: np.ndarray, targets: np.ndarray) -> None:
        entering = self._chosen.candidates(keys)
        if not entering.any():
            return
        sources, targets = sources[entering], targets[entering]
        source_sizes = np.fromiter(map(len, sources), np.int64, len(sources))
        target_sizes = np.fromiter(map(len, targets), np.int64, len(targets))
        offsets = self._end + np.concatenate(
            [[0], np.cumsum(source_sizes + target_sizes)[:-1]]).astype(np.int64)
        text = b"".join(side for pair in zip(sources, targets) for side in pair)
        self._file.write(text)
        self._end += len(text)
        self._chosen.offer(keys[entering], offsets, source_sizes, target_sizes)

    def finish(self, size: int) -> "SentenceSample":
        """Ends the offers: the sample is the first `size` sentences in key order."""
        self._file.flush()
        _, *places = self._chosen.sorted()
        self._places = tuple(places)
        self._size = min(2 * len(self._chosen.keys), size)
        return self

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        offsets, source_sizes, target_sizes = self._places
        pair = index // 2
        offset, source_size = int(offsets[pair]), int(source_sizes[pair])
        if index % 2:
            offset, size = offset + source_size, int(target_sizes[pair])
        else:
            size = source_size
        return os.pread(self._file.fileno(), size, offset).decode("utf-8")


def scan(corpus: Corpus, *, sample_sentences: int, skip_bad_lines: bool = False,
         seed: int = 0, sample_dir: str | None = None) -> Scan:
    """Reads the training side once, in file order, in bounded memory (see the module doc).

    The vocabulary sample is uniform over the good pairs: each gets a seeded random key and the
    pairs with the smallest keys are kept. Without a DEV file, the pairs with the smallest
    `holdout_key` are held out: HOLDOUT_FRACTION of the pairs, at least 1 and at most
    MAX_HOLDOUT, found the same way.

    `sample_dir` holds the sample's (unlinked) temporary file; default: the system's temporary
    directory.

    Raises:
        DataError: on the first bad line (unless skip_bad_lines), or if no line is good.
    """
    check_at_least("sample_sentences", sample_sentences, 2)
    rng = np.random.default_rng(seed)
    # Pairs: a source and a target sentence each.
    sample = SentenceSample((sample_sentences + 1) // 2, sample_dir)
    held_out = _BottomK(MAX_HOLDOUT, 2) if corpus.holds_out_dev else None
    num_pairs = num_bad = 0
    bad_lines: list[tuple[str, str]] = []
    records = corpus.records(in_order=True)
    if held_out is not None:
        records = records.map(do_not_convert(
            lambda r: {**r, "holdout_key": holdout_key(r, corpus.seed)}))
    for batch, bad in checked_batches(records, skip_bad_lines):
        num_bad += int(bad.sum())
        for origin, line, reason in zip(batch["origin"][bad][:20 - len(bad_lines)],
                                        batch["line"][bad], batch["reason"][bad]):
            bad_lines.append((f"{origin.decode()}:{line}", reason.decode()))
        good = ~bad
        num_pairs += int(good.sum())
        sources, targets = batch["source"][good], batch["target"][good]
        sample.offer(rng.random(len(sources)), sources, targets)
        if held_out is not None:
            held_out.offer(batch["holdout_key"][good], sources, targets)
    if not num_pairs:
        raise DataError(", ".join(corpus.files), None,
                        f"no valid training line ({num_bad} bad lines skipped)")
    dev = threshold = None
    num_held_out = 0
    if held_out is not None:
        if num_pairs < 2:
            raise DataError(", ".join(corpus.files), None,
                            "need at least 2 pairs to hold out a dev set")
        wanted = min(MAX_HOLDOUT, max(1, round(num_pairs * HOLDOUT_FRACTION)))
        keys, sources, targets = held_out.sorted()
        threshold = int(keys[wanted - 1])
        num_held_out = int((keys <= threshold).sum())
        dev = ParallelText(list(dict.fromkeys(zip(utf8_strings(sources[:wanted]),
                                                  utf8_strings(targets[:wanted])))),
                           f"{corpus.spec} (held out)")
    # In key order: deterministic for a seed.
    return Scan(num_pairs - num_held_out, num_bad, bad_lines, sample.finish(sample_sentences),
                dev, threshold, num_held_out)

"""The one ordered pass over a corpus's training side: counts, the held-out dev set, and the
bounded random sample the vocabulary is trained on.

`scan` reads the training side once, in order, before any training: it reports the first bad
line, counts the pairs, collects the held-out dev pairs (when the data spec names no DEV file)
and draws the sample the vocabulary learns from (§5.1), so that neither the time nor the memory
of the vocabulary grows with the corpus.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from tfformer.data.sources import (
    Corpus,
    DataError,
    ParallelText,
    checked_batches,
    holdout_key,
    utf8_strings,
)

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
            (both sides), at most `sample_sentences`, decoded as they are read.
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

    Offers go to a pending buffer, compacted to the k smallest once it holds k/16 more items, so
    each item costs O(1) amortized and at most ~1.06 k items are held (compacting at k more
    would hold 2 k: the vocabulary sample's text is most of the scan's memory); once k items
    are kept, only keys below the k-th smallest kept key can still enter, and they are the only
    ones buffered.
    """

    def __init__(self, k: int, key_dtype=np.float64):
        self.k = k
        self.keys = np.zeros([0], key_dtype)
        self.sources = np.zeros([0], object)
        self.targets = np.zeros([0], object)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_size = 0
        self._bound = None  # the k-th smallest kept key, once k are kept

    def offer(self, keys: np.ndarray, sources: np.ndarray, targets: np.ndarray) -> None:
        if self._bound is not None:
            below = keys < self._bound
            keys, sources, targets = keys[below], sources[below], targets[below]
        if len(keys):
            self._pending.append((keys, sources, targets))
            self._pending_size += len(keys)
            if self._pending_size >= max(1, self.k // 16):
                self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        self.keys = np.concatenate([self.keys, *(p[0] for p in self._pending)])
        self.sources = np.concatenate([self.sources, *(p[1] for p in self._pending)])
        self.targets = np.concatenate([self.targets, *(p[2] for p in self._pending)])
        self._pending, self._pending_size = [], 0
        if len(self.keys) > self.k:
            chosen = np.argpartition(self.keys, self.k - 1)[:self.k]
            self.keys, self.sources, self.targets = (
                self.keys[chosen], self.sources[chosen], self.targets[chosen])
        if len(self.keys) >= self.k:
            self._bound = self.keys.max()

    def sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Keys, sources and targets (UTF-8 bytes) in key order."""
        self._compact()
        order = np.argsort(self.keys, kind="stable")
        return self.keys[order], self.sources[order], self.targets[order]


class SentenceSample(Sequence[str]):
    """The vocabulary sample's sentences (source, target, source, ...), kept as the UTF-8 bytes
    the scan read and decoded one at a time as they are read: a million sentences as Python str
    would take twice the memory of their bytes."""

    def __init__(self, sources: np.ndarray, targets: np.ndarray, size: int):
        self._sources, self._targets, self._size = sources, targets, size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        side = self._sources if index % 2 == 0 else self._targets
        return side[index // 2].decode("utf-8")


def scan(corpus: Corpus, *, sample_sentences: int, skip_bad_lines: bool = False,
         seed: int = 0) -> Scan:
    """Reads the training side once, in file order, in bounded memory (see the module doc).

    The vocabulary sample is uniform over the good pairs: each gets a seeded random key and the
    pairs with the smallest keys are kept. Without a DEV file, the pairs with the smallest
    `holdout_key` are held out: HOLDOUT_FRACTION of the pairs, at least 1 and at most
    MAX_HOLDOUT, found the same way.

    Raises:
        DataError: on the first bad line (unless skip_bad_lines), or if no line is good.
    """
    if sample_sentences < 2:
        raise ValueError(f"sample_sentences must be >= 2, got {sample_sentences}")
    rng = np.random.default_rng(seed)
    sample = _BottomK((sample_sentences + 1) // 2)  # pairs: a source and a target sentence each
    held_out = _BottomK(MAX_HOLDOUT, np.int64) if corpus.holds_out_dev else None
    num_pairs = num_bad = 0
    bad_lines: list[tuple[str, str]] = []
    records = corpus.records(in_order=True)
    if held_out is not None:
        records = records.map(lambda r: {**r, "holdout_key": holdout_key(r, corpus.seed)})
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
    _, sources, targets = sample.sorted()  # in key order: deterministic for a seed
    sentences = SentenceSample(sources, targets, min(2 * len(sources), sample_sentences))
    return Scan(num_pairs - num_held_out, num_bad, bad_lines, sentences, dev, threshold,
                num_held_out)

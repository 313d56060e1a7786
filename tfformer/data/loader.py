"""Batches from a prepared corpus (`tfformer.data.store`) in NumPy: any backend, no TensorFlow.

The batches are those of `tfformer.data.batching`, by the same rules: pairs longer than the
length limit dropped (and counted), the bucket grid of `tfformer.data.buckets` and its rows per
bucket under the token budget (paper §5.1), or rows of `pack_length` tokens packed first-fit
within windows of pairs with segment ids (`tfformer.data.packing`). Elements are the same
``((source, target_in), target_out)`` (packed: ``((source, target_in, source_segments,
target_segments), target_out)``) int32 arrays.

What differs is the order's unit: an epoch. Epoch e is a seeded permutation of the shard's
pairs, a function of (seed, e, shard) alone. A bucket's batch leaves when its rows are full, in
the order the permutation fills them, as a shuffled stream's buckets do; each bucket's last
partial batch (packed: the last partial batch) is filled up with PAD rows at the epoch's end,
so no pair is dropped or repeated within an epoch. Batch n of the endless stream is therefore
found without reading the n before it: `batches(start=n)` plans the epoch it lies in and starts
there, which makes a resume instant (`position`). Bucketed epochs all have the same number of
batches; packed ones vary a little with the order, so their sizes are kept (`epoch_sizes`) and
can be handed back to a later loader (`known_epoch_sizes`).

A background thread builds the next batches while the model trains on the current one.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Callable, Iterator, Sequence

import numpy as np

from tfformer.data.buckets import (
    DEFAULT_BUCKET_GROWTH,
    bucket_batch_sizes,
    bucket_lengths,
    rows_per_batch,
)
from tfformer.data.store import Split
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID
from tfformer.utils.checks import check_at_least

DEFAULT_WINDOW = 1024  # pairs packed together (as tfformer.data.packing.DEFAULT_WINDOW)
PREFETCH = 4  # batches built ahead by the background thread
BLOCK_WINDOWS = 64  # packing windows planned together: the first batch waits for one block


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """Which pairs go where in one bucketed epoch: batch b holds pairs[starts[b]:starts[b+1]] in
    rows 0.., padded to lengths[b] and rows[b] rows."""

    pairs: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    rows: np.ndarray

    @property
    def num_batches(self) -> int:
        return len(self.lengths)

    def has_batch(self, index: int) -> bool:
        return index < self.num_batches


class PackedEpoch:
    """One epoch's packing, planned a block of windows at a time as its batches are asked for,
    so the first batch waits for one block, not the whole epoch.

    Rows are numbered across the epoch in the order the blocks fill them; batch b holds rows
    [b * rows, (b + 1) * rows), the last one filled up with PAD rows.
    """

    def __init__(self, order: np.ndarray, source_lengths: np.ndarray,
                 target_lengths: np.ndarray, *, length: int, window: int, rows: int,
                 block: int, on_complete: Callable[[int], None]):
        self.order, self.length, self.window, self.rows = order, length, window, rows
        self._lengths = (source_lengths, target_lengths)
        self._block = block
        self._on_complete = on_complete
        self._planned = 0  # pairs of `order` packed so far
        self.rows_planned = 0
        # Per block, sorted by (row, segment): pairs, row, segment id, source and target column.
        self._blocks: list[tuple[np.ndarray, ...]] = []

    @property
    def complete(self) -> bool:
        return self._planned >= len(self.order)

    def _plan_rows(self, count: float) -> None:
        while self.rows_planned < count and not self.complete:
            pairs = self.order[self._planned:self._planned + self._block]
            row, slot, at, num_rows = first_fit(self._lengths[0][pairs], self._lengths[1][pairs],
                                                self.length, self.window)
            by_row = np.lexsort((slot, row))
            self._blocks.append((pairs[by_row], (row[by_row] + self.rows_planned).astype(np.int64),
                                 slot[by_row].astype(np.int32), at[by_row].astype(np.int32)))
            self.rows_planned += num_rows
            self._planned += len(pairs)
            if self.complete:
                self._on_complete(self.num_batches)

    @property
    def num_batches(self) -> int:
        """The epoch's batches (plans the whole epoch)."""
        self._plan_rows(np.inf)
        return -(-self.rows_planned // self.rows)

    def has_batch(self, index: int) -> bool:
        self._plan_rows(index * self.rows + 1)
        return self.rows_planned > index * self.rows

    def members(self, index: int) -> tuple[np.ndarray, ...]:
        """Batch `index`'s pairs, rows within the batch, segment ids and [source, target]
        columns."""
        first, end = index * self.rows, (index + 1) * self.rows
        self._plan_rows(end)
        parts = []
        for pairs, row, slot, at in self._blocks:
            if len(row) and row[-1] >= first and row[0] < end:
                lo, hi = np.searchsorted(row, [first, end], side="left")
                parts.append((pairs[lo:hi], row[lo:hi] - first, slot[lo:hi], at[lo:hi]))
        return tuple(np.concatenate(column) for column in zip(*parts))


class BatchStats:
    """The shapes and padding of the batches built so far (read ahead included), read by
    `tfformer.train.callbacks.LogBatchShapes` as the tf.data stream's `BatchStats` is."""

    def __init__(self):
        self._lock = threading.Lock()
        self._shapes: dict[str, int] = {}
        self._tokens = self._slots = self._target_tokens = 0

    def record(self, source: np.ndarray, target_in: np.ndarray, target_out: np.ndarray) -> None:
        key = f"{target_in.shape[0]}x{target_in.shape[1]}"
        real = int(np.count_nonzero(source != PAD_ID) + np.count_nonzero(target_in != PAD_ID))
        with self._lock:
            self._shapes[key] = self._shapes.get(key, 0) + 1
            self._tokens += real
            self._target_tokens += int(np.count_nonzero(target_out != PAD_ID))
            self._slots += source.size + target_in.size

    def read(self) -> dict:
        with self._lock:
            shapes = dict(sorted(self._shapes.items(), key=lambda kv: -kv[1]))
            tokens, slots, target_tokens = self._tokens, self._slots, self._target_tokens
        return {"shapes": shapes, "batches": sum(shapes.values()), "tokens": tokens,
                "target_tokens": target_tokens,
                "padding": 1 - tokens / slots if slots else 0.0}


class Loader:
    """The batches of one split of a store for one worker (see the module docstring).

    Args:
        split: the store's split (`Store.train`, `Store.dev`).
        batch_tokens: token budget per batch; >= max_length * batch_multiple.
        max_length: longest source + EOS / BOS + target; longer pairs are dropped.
        batch_multiple: every batch's rows are a multiple of it (the replicas).
        bucket_growth, min_bucket_length: the grid (`tfformer.data.buckets.bucket_lengths`).
        pack_length: 0 buckets by length; else rows of this many tokens, packed.
        seed: the order; shuffle=False keeps the split's order (dev and test sets).
        num_shards, shard_index: this worker's pairs: every num_shards-th, from shard_index.
        window: pairs packed together.
        fixed_rows: a bucket's last batch filled up to the bucket's rows (what a compiled step
            needs); else only to a multiple of batch_multiple.
        known_epoch_sizes: packed batches per epoch that an earlier loader with the same
            arguments found (`epoch_sizes`), so `position` need not plan those epochs again.
        stats: counts the batches' shapes and padding as they are built.
        on_new_epoch: called with `epoch_sizes` whenever an epoch is planned for the first time
            (a run keeps them for its next resume).
        on_epoch_begun: called with `num_dropped` each time the stream (`batches`) enters an
            epoch, its first included (a run counts the pairs dropped).
    """

    def __init__(self, split: Split, *, batch_tokens: int, max_length: int,
                 batch_multiple: int = 1, bucket_growth: float = DEFAULT_BUCKET_GROWTH,
                 min_bucket_length: int = 8, pack_length: int = 0, seed: int = 0,
                 shuffle: bool = True, num_shards: int = 1, shard_index: int = 0,
                 window: int = DEFAULT_WINDOW, fixed_rows: bool = True,
                 known_epoch_sizes: Sequence[int] = (), stats: BatchStats | None = None,
                 on_new_epoch: Callable[[list[int]], None] | None = None,
                 on_epoch_begun: Callable[[int], None] | None = None):
        check_at_least("max_length", max_length, 2, why="a token plus BOS/EOS")
        check_at_least("batch_multiple", batch_multiple)
        check_at_least("window", window)
        if not 0 <= shard_index < num_shards:
            raise ValueError(f"shard_index ({shard_index}) must be in [0, {num_shards})")
        self.seed, self.shuffle, self.window = seed, shuffle, window
        self.pack_length, self.batch_multiple = pack_length, batch_multiple
        self.stats = stats
        self._on_new_epoch, self._on_epoch_begun = on_new_epoch, on_epoch_begun
        self._fixed_rows = fixed_rows
        self._ids = split.ids
        self._offsets = split.offsets
        source_lengths = split.lengths("source") + 1  # + EOS
        target_lengths = split.lengths("target") + 1  # BOS + / + EOS
        if pack_length:
            if pack_length > max_length:
                raise ValueError(f"pack_length ({pack_length}) must be <= max_length "
                                 f"({max_length})")
            self.limit = pack_length
            self.grid = [pack_length]
            self.batch_sizes = [rows_per_batch(pack_length, batch_tokens, batch_multiple)]
        else:
            if batch_tokens < max_length * batch_multiple:
                raise ValueError(
                    f"batch_tokens ({batch_tokens}) must be >= max_length ({max_length}) * "
                    f"batch_multiple ({batch_multiple}) so that every kept sentence fits in a "
                    "batch")
            self.limit = max_length
            self.grid = bucket_lengths(max_length, min_length=min_bucket_length,
                                       growth=bucket_growth)
            self.batch_sizes = bucket_batch_sizes(self.grid, batch_tokens, batch_multiple)
        keep = (source_lengths <= self.limit) & (target_lengths <= self.limit)
        shard = np.zeros_like(keep)
        shard[shard_index::num_shards] = True
        self.num_dropped = int(np.count_nonzero(~keep & shard))
        self._pairs = np.flatnonzero(keep & shard)
        if not len(self._pairs):
            raise ValueError(f"{split.name}: no pair of shard {shard_index} of {num_shards} is "
                             f"within {self.limit} tokens")
        self._source_lengths = source_lengths
        self._target_lengths = target_lengths
        # The pipeline's bucket rule: bucket i iff grid[i-1] < length <= grid[i].
        self._bucket = np.searchsorted(
            self.grid, np.maximum(source_lengths, target_lengths), side="left")
        self._epoch_sizes = list(known_epoch_sizes)
        # Bucketed, every epoch has the same batches per bucket, whatever the order.
        counts = np.bincount(self._bucket[self._pairs], minlength=len(self.grid))
        self._bucketed_epoch_size = int(sum(-(-c // s) for c, s in zip(counts, self.batch_sizes)))
        self._plans: dict[int, EpochPlan | PackedEpoch] = {}
        self.planned: list[int] = []  # the epochs planned, in order (what a resume cost)

    # -- the order ----------------------------------------------------------------------------

    @property
    def num_pairs(self) -> int:
        """Pairs kept in this shard (each once per epoch)."""
        return len(self._pairs)

    def _order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return self._pairs
        return np.random.default_rng([self.seed, epoch]).permutation(self._pairs)

    def plan(self, epoch: int) -> EpochPlan | PackedEpoch:
        """Epoch `epoch`'s plan (the last two asked for are kept): an `EpochPlan`, or packed a
        `PackedEpoch`, planned as its batches are asked for."""
        if epoch not in self._plans:
            self.planned.append(epoch)
            order = self._order(epoch)
            if self.pack_length:
                plan = PackedEpoch(
                    order, self._source_lengths, self._target_lengths,
                    length=self.pack_length, window=self.window, rows=self.batch_sizes[0],
                    block=self.window * BLOCK_WINDOWS,
                    on_complete=lambda size: self._planned_in_full(epoch, size))
            else:
                plan = self._bucket_plan(order)
                self._planned_in_full(epoch, plan.num_batches)
            self._plans = {e: p for e, p in self._plans.items() if e == epoch - 1}
            self._plans[epoch] = plan
        return self._plans[epoch]

    def _planned_in_full(self, epoch: int, size: int) -> None:
        if epoch == len(self._epoch_sizes):
            self._epoch_sizes.append(size)
            if self._on_new_epoch is not None:
                self._on_new_epoch(self.epoch_sizes)

    def _bucket_plan(self, order: np.ndarray) -> EpochPlan:
        buckets = self._bucket[order]
        members, lengths, rows, finish = [], [], [], []
        for b, (length, size) in enumerate(zip(self.grid, self.batch_sizes)):
            where = np.flatnonzero(buckets == b)
            for first in range(0, len(where), size):
                chunk = where[first:first + size]
                members.append(order[chunk])
                lengths.append(length)
                full = len(chunk) == size
                rows.append(size if full or self._fixed_rows
                            else -(-len(chunk) // self.batch_multiple) * self.batch_multiple)
                # A full batch leaves when its last pair arrives, a partial one at the end.
                finish.append((chunk[-1] if full else len(order)) * len(self.grid) + b)
        by_finish = np.argsort(finish, kind="stable")
        sizes = np.array([len(members[i]) for i in by_finish], np.int64)
        return EpochPlan(
            pairs=np.concatenate([members[i] for i in by_finish]),
            starts=np.concatenate([[0], np.cumsum(sizes)]),
            lengths=np.array(lengths)[by_finish], rows=np.array(rows)[by_finish])

    # -- positions ----------------------------------------------------------------------------

    @property
    def epoch_sizes(self) -> list[int]:
        """Batches in each epoch planned so far (from epoch 0)."""
        return list(self._epoch_sizes)

    def position(self, batch: int) -> tuple[int, int]:
        """(epoch, batch within it) of batch number `batch` of the endless stream."""
        check_at_least("batch", batch, 0)
        if not self.pack_length:
            return divmod(batch, self._bucketed_epoch_size)
        epoch = 0
        while True:
            # A known epoch size spares planning; else the epoch is planned only as far as
            # needed (the whole of it only when the batch lies beyond).
            if epoch < len(self._epoch_sizes) and batch >= self._epoch_sizes[epoch]:
                batch -= self._epoch_sizes[epoch]
            elif epoch < len(self._epoch_sizes) or self.plan(epoch).has_batch(batch):
                return epoch, batch
            else:
                batch -= self.plan(epoch).num_batches
            epoch += 1

    # -- batches ------------------------------------------------------------------------------

    def _flat(self, side: str, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids of `pairs`' `side`, one after the other, and each one's piece count."""
        starts = self._offsets[side][pairs]
        counts = self._offsets[side][pairs + 1] - starts
        return np.asarray(self._ids[side][np.repeat(starts, counts) + _ragged_range(counts)],
                          np.int32), counts

    def _place(self, shape, rows, columns, values) -> np.ndarray:
        out = np.full(shape, PAD_ID, np.int32)
        out[rows, columns] = values
        return out

    def _sides(self, pairs: np.ndarray, row: np.ndarray, source_at: np.ndarray,
               target_at: np.ndarray, shape: tuple[int, int], slot: np.ndarray | None = None):
        """source (+ EOS), target_in (BOS +), target_out (+ EOS) of `pairs` at (row, column),
        and with `slot` their segment ids."""
        source, source_counts = self._flat("source", pairs)
        target, target_counts = self._flat("target", pairs)

        def spots(counts, at):  # each id's (row, column), one more for BOS / EOS
            n = counts + 1
            return np.repeat(row, n), np.repeat(at, n) + _ragged_range(n), n

        source_rows, source_columns, source_n = spots(source_counts, source_at)
        target_rows, target_columns, target_n = spots(target_counts, target_at)
        source_values = _with_special(source, source_counts, EOS_ID)
        target_in = _with_special(target, target_counts, BOS_ID, first=True)
        target_out = _with_special(target, target_counts, EOS_ID)
        out = [self._place(shape, source_rows, source_columns, source_values),
               self._place(shape, target_rows, target_columns, target_in)]
        if slot is not None:
            out += [self._place(shape, source_rows, source_columns, np.repeat(slot, source_n)),
                    self._place(shape, target_rows, target_columns, np.repeat(slot, target_n))]
        return tuple(out), self._place(shape, target_rows, target_columns, target_out)

    def batch(self, epoch: int, index: int):
        """Batch `index` of epoch `epoch` as NumPy arrays (see the module docstring)."""
        plan = self.plan(epoch)
        if index < 0 or not plan.has_batch(index):
            raise IndexError(f"epoch {epoch} has {plan.num_batches} batches, not {index + 1}")
        if self.pack_length:
            pairs, row, slot, at = plan.members(index)
            inputs, target_out = self._sides(pairs, row, at[:, 0], at[:, 1],
                                             (self.batch_sizes[0], self.pack_length), slot=slot)
        else:
            pairs = plan.pairs[plan.starts[index]:plan.starts[index + 1]]
            zeros = np.zeros(len(pairs), np.int64)
            inputs, target_out = self._sides(
                pairs, np.arange(len(pairs)), zeros, zeros,
                (int(plan.rows[index]), int(plan.lengths[index])))
        if self.stats is not None:
            self.stats.record(inputs[0], inputs[1], target_out)
        return inputs, target_out

    def epoch(self, epoch: int = 0) -> Iterator:
        """One epoch's batches, in order."""
        index = 0
        while self.plan(epoch).has_batch(index):
            yield self.batch(epoch, index)
            index += 1

    def epoch_size(self, epoch: int) -> int:
        """Batches in epoch `epoch` (packed: plans it in full, unless known)."""
        if not self.pack_length:
            return self._bucketed_epoch_size
        if epoch < len(self._epoch_sizes):
            return self._epoch_sizes[epoch]
        return self.plan(epoch).num_batches

    def batches(self, start: int = 0, prefetch: int = PREFETCH) -> Iterator:
        """The endless stream from batch number `start` on, built `prefetch` batches ahead in a
        background thread (0: in the caller's)."""
        epoch, index = self.position(start)

        def produce():
            nonlocal epoch, index
            begun = self._on_epoch_begun or (lambda dropped: None)
            begun(self.num_dropped)
            while True:
                if not self.plan(epoch).has_batch(index):
                    epoch, index = epoch + 1, 0
                    begun(self.num_dropped)
                yield self.batch(epoch, index)
                index += 1

        if not prefetch:
            return produce()
        return _prefetched(produce(), prefetch)


def first_fit(source_lengths: np.ndarray, target_lengths: np.ndarray, length: int,
              window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """First-fit packing of pairs in arrival order within windows of `window` pairs: each pair
    goes to the first row of its window with room for both sides, else to a new row
    (`tfformer.data.packing`'s rule).

    Every window is packed at once, one pair position at a time across all of them, so an
    epoch costs `window` vectorized steps rather than a Python step per pair.

    Returns:
        (row, slot, at, num_rows): each pair's row (numbered across windows, in order), its
        segment id in the row (1, 2, ...), its [source, target] columns, and the rows in all.
    """
    count = len(source_lengths)
    windows = max(1, -(-count // window))
    needs = np.zeros([windows * window, 2], np.int32)
    needs[:count, 0], needs[:count, 1] = source_lengths, target_lengths
    needs = needs.reshape(windows, window, 2)
    real = (np.arange(windows * window) < count).reshape(windows, window)
    used = np.zeros([windows, window, 2], np.int32)  # tokens of each row of each window
    segments = np.zeros([windows, window], np.int32)
    open_rows = np.zeros(windows, np.int64)
    row = np.zeros([windows, window], np.int64)
    slot = np.zeros([windows, window], np.int64)
    at = np.zeros([windows, window, 2], np.int64)
    every = np.arange(windows)
    rows_seen = 1  # rows any window has opened, plus one: the only ones to look at
    for i in range(window):
        need, counts = needs[:, i], real[:, i]
        open_ = np.arange(rows_seen)[None] < open_rows[:, None]
        fits = ((used[:, :rows_seen] + need[:, None]) <= length).all(axis=2) & open_
        chosen = np.where(fits.any(axis=1), fits.argmax(axis=1), open_rows)
        at[:, i] = used[every, chosen]
        used[every, chosen] += need
        segments[every, chosen] += counts
        slot[:, i] = segments[every, chosen]
        row[:, i] = chosen
        open_rows = np.where(counts, np.maximum(open_rows, chosen + 1), open_rows)
        rows_seen = min(window, int(open_rows.max()) + 1)
    first_row = np.cumsum(open_rows) - open_rows
    row += first_row[:, None]
    return (row.reshape(-1)[:count], slot.reshape(-1)[:count], at.reshape(-1, 2)[:count],
            int(open_rows.sum()))


def _ragged_range(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each count c, one after the other: each id's place within its sentence."""
    return np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)


def _with_special(values: np.ndarray, counts: np.ndarray, special: int,
                  first: bool = False) -> np.ndarray:
    """Sentences of `counts` ids one after the other, each with `special` after it (or, with
    `first`, before it)."""
    n = counts + 1
    out = np.empty(int(n.sum()), np.int32)
    ends = np.cumsum(n)
    at = ends - n if first else ends - 1
    pieces = np.ones(len(out), bool)
    pieces[at] = False
    out[pieces] = values
    out[at] = special
    return out


def _prefetched(items: Iterator, size: int) -> Iterator:
    """`items` built in a daemon thread, up to `size` ahead; an error there is raised here. The
    thread stops once the returned generator is closed or collected."""
    ready: queue.Queue = queue.Queue(size)
    stop = threading.Event()
    done = object()

    def work():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            ready.put(error)
        ready.put(done)

    threading.Thread(target=work, daemon=True, name="tfformer-loader").start()

    def consume():
        try:
            while True:
                item = ready.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()

    return consume()

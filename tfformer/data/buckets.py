"""The grid of batch shapes: bucket lengths and rows per bucket, and the rows of packed batches
(no TensorFlow here).

Batches come in a small, known set of shapes so that XLA compiles each step once per shape:
`tfformer.data.batching` pads every batch to its bucket's length and gives it the bucket's rows.
"""

from __future__ import annotations

from typing import Sequence

from tfformer.utils.checks import check_at_least

DEFAULT_BUCKET_GROWTH = 1.1  # as much padding as padding each batch to its longest pair
# Where every new shape is one more program to compile (TensorFlow's jit_compile, JAX): about
# half the shapes for some more padding (docs/results.md, "Batch shapes and XLA").
COMPILED_BUCKET_GROWTH = 1.25


def default_growth(compiled: bool) -> float:
    """The grid's growth when none is given: coarser where steps are compiled."""
    return COMPILED_BUCKET_GROWTH if compiled else DEFAULT_BUCKET_GROWTH


def bucket_lengths(max_length: int, *, min_length: int = 8,
                   growth: float = DEFAULT_BUCKET_GROWTH) -> list[int]:
    """The grid of padded bucket lengths: geometric from min_length (dense for short
    sentences, where a token of padding costs most), the last one max_length.

    A pair goes to the first bucket whose length holds its longer side; a bucket's batches are
    padded to its length on both sides. A smaller growth pads less and has more buckets, each
    one more program for XLA to compile.
    """
    if growth <= 1:
        raise ValueError(f"bucket growth must be > 1, got {growth}")
    check_at_least("min_length", min_length, 2)
    lengths = []
    length = min_length
    while length < max_length:
        lengths.append(length)
        length = max(length + 1, int(length * growth))
    return lengths + [max_length]


def bucket_batch_sizes(lengths: Sequence[int], batch_tokens: int,
                       multiple: int = 1) -> list[int]:
    """Rows of each bucket's batches: the most of its padded length within the token budget,
    in whole multiples (one share per replica)."""
    return [batch_tokens // n // multiple * multiple for n in lengths]


def rows_per_batch(length: int, batch_tokens: int, multiple: int = 1) -> int:
    """Rows of length `length` within the token budget, in whole multiples (one share per
    replica)."""
    check_at_least("batch_multiple", multiple)
    rows = batch_tokens // length // multiple * multiple
    if rows < 1:
        raise ValueError(f"batch_tokens ({batch_tokens}) must be >= pack_length ({length}) * "
                         f"batch_multiple ({multiple}) so that a batch holds one row per replica")
    return rows

"""Packing: several pairs per row, one batch shape for every training step.

Bucketing by length (`tfformer.data.batching`) gives a batch shape per bucket, each one more
program for XLA (TensorFlow's jit_compile, JAX) to compile. Packing instead puts pairs one
after the other into rows of a fixed `length`, as Flax's WMT example does for TPUs: every batch
is [rows, length], so a run compiles its train step once, and the rows are filled better than
a bucket pads them (docs/results.md, "Batch shapes and XLA").

Each row carries segment ids, the pair's number in the row (1, 2, ...; PAD is 0), on both
sides; the model (`Transformer` with four inputs) lets a token attend only within its pair and
restarts the positions at each pair, so a packed row computes what its pairs compute alone.

Pairs are packed first-fit within windows of `window` consecutive pairs (in the order the
stream shuffled them): each pair goes to the first row of the window that has room for both of
its sides. The loop runs in the tf.data graph (no py_function).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.special_tokens import PAD_ID
from tfformer.utils.checks import check_at_least

DEFAULT_WINDOW = 1024  # pairs packed together: a window of 1024 fills rows within 1% of 4096


def pack_pairs(examples: tf.data.Dataset, *, length: int, rows: int,
               window: int = DEFAULT_WINDOW) -> tf.data.Dataset:
    """Packs tokenized pairs into batches of one shape.

    Args:
        examples: ``((source, target_in), target_out)`` rank-1 int32 elements, no side longer
            than `length` (filter longer ones first).
        length: tokens per row.
        rows: rows per batch.
        window: consecutive pairs packed together.

    Returns:
        ``((source, target_in, source_segments, target_segments), target_out)`` int32 batches
        [rows, length]. Each pair lies in one row, at the same segment id on both sides. Rows
        cross window boundaries into the next batch; a finite stream's last batch is filled up
        with rows of PAD only (which the PAD-masked loss and metrics ignore), so every batch has
        the one shape and no pair is dropped.
    """
    check_at_least("pack_length", length, 2, why="a token plus BOS/EOS")
    check_at_least("rows", rows)
    check_at_least("window", window)
    packed = examples.ragged_batch(window).map(
        do_not_convert(lambda inputs, target: _pack_window(*inputs, target, length)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    @do_not_convert
    def fill_rows(inputs, target):
        def fill(x):
            x = tf.pad(x, [[0, rows - tf.shape(x)[0]], [0, 0]], constant_values=PAD_ID)
            return tf.ensure_shape(x, [rows, length])

        return tuple(fill(x) for x in inputs), fill(target)

    return packed.unbatch().batch(rows).map(fill_rows)


@tf.function(autograph=False)
def _first_fit(source_lengths: tf.Tensor, target_lengths: tf.Tensor, length: int):
    """Row, segment id and offsets of each pair, first-fit in arrival order."""
    count = tf.shape(source_lengths)[0]
    needs = tf.stack([source_lengths, target_lengths], axis=1)  # [pairs, 2]

    def body(i, used, segments, rows, slots, offsets):
        fits = tf.reduce_all(used + needs[i] <= length, axis=1)
        # An empty row always fits, and rows fill in order: the first fit is an open row or
        # the next new one.
        row = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
        rows = rows.write(i, row)
        slots = slots.write(i, segments[row] + 1)
        offsets = offsets.write(i, used[row])
        used = tf.tensor_scatter_nd_add(used, [[row]], needs[i][tf.newaxis])
        segments = tf.tensor_scatter_nd_add(segments, [[row]], [1])
        return i + 1, used, segments, rows, slots, offsets

    arrays = [tf.TensorArray(tf.int32, size=count) for _ in range(2)]
    _, used, _, rows, slots, offsets = tf.while_loop(
        lambda i, *_: i < count, body,
        (0, tf.zeros([count, 2], tf.int32), tf.zeros([count], tf.int32), *arrays,
         tf.TensorArray(tf.int32, size=count, element_shape=[2])),
        parallel_iterations=1)
    num_rows = tf.reduce_sum(tf.cast(used[:, 0] > 0, tf.int32))
    return num_rows, rows.stack(), slots.stack(), offsets.stack()


def _pack_window(source: tf.RaggedTensor, target_in: tf.RaggedTensor,
                 target_out: tf.RaggedTensor, length: int):
    """One window of pairs -> its packed rows [num_rows, length] (see `pack_pairs`)."""
    source_lengths = tf.cast(source.row_lengths(), tf.int32)
    target_lengths = tf.cast(target_in.row_lengths(), tf.int32)
    # A longer side would fit no row: named here rather than as scatter_nd's index error.
    longest = tf.reduce_max(tf.concat([source_lengths, target_lengths, [0]], 0))
    fits = tf.debugging.assert_less_equal(
        longest, length, message=f"pack_pairs: a pair has a side longer than pack_length "
                                 f"({length}) tokens; filter such pairs out before packing")
    with tf.control_dependencies([fits]):
        source_lengths = tf.identity(source_lengths)
    num_rows, rows, slots, offsets = _first_fit(source_lengths, target_lengths, length)

    def place(ragged, lengths, offset, values=None):
        # Token j of pair i goes to [rows[i], offset[i] + j].
        columns = tf.repeat(offset, lengths) + tf.ragged.range(lengths).values
        indices = tf.stack([tf.repeat(rows, lengths), columns], axis=1)
        return tf.scatter_nd(indices, ragged.values if values is None else
                             tf.repeat(values, lengths), [num_rows, length])

    source_offsets, target_offsets = offsets[:, 0], offsets[:, 1]
    return ((place(source, source_lengths, source_offsets),
             place(target_in, target_lengths, target_offsets),
             place(source, source_lengths, source_offsets, slots),
             place(target_in, target_lengths, target_offsets, slots)),
            place(target_out, target_lengths, target_offsets))

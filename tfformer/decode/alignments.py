"""Word alignments from the encoder-decoder attention (§3.2.3): for each target piece, the source
piece that the last decoder layer attends to most, averaged over its heads, as fairseq's
`--print-alignment` takes them; written in the Pharaoh format ("i-j" pairs) of fast_align.

The weights come from a teacher-forced pass over the search's own tokens
(`Transformer.attention_weights`): the decoder is causal, so a position's attention in that pass
is the one it had when the search chose its token, and the searches themselves compute no
attention maps.
"""

from __future__ import annotations

import keras
from keras import ops

from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

NO_ALIGNMENT = -1  # at EOS and PAD, and for a source without pieces


def alignment_indices(model: keras.Model, source_ids, tokens):
    """The source position each target piece attends to most.

    Args:
        model: a `Transformer`.
        source_ids: int [batch, S], EOS-terminated and PAD-padded, as the search was given.
        tokens: int [batch, T]: one hypothesis per sentence as the searches return it (no BOS,
            EOS-terminated, PAD after).

    Returns:
        int32 [batch, T]: for target position j, the source position i < the source's EOS with
        the largest weight in the last decoder layer's cross-attention averaged over heads;
        `NO_ALIGNMENT` at EOS and PAD, and everywhere for a source of EOS alone.
    """
    tokens = ops.cast(tokens, "int32")
    source_ids = ops.cast(source_ids, "int32")
    length = ops.shape(tokens)[1]
    begin = ops.full_like(tokens[:, :1], BOS_ID)
    target_in = ops.concatenate([begin, tokens], axis=1)[:, :length]
    cross = model.attention_weights(source_ids, target_in)["decoder_cross"][-1]  # [B, h, T, S]
    weights = ops.mean(ops.cast(cross, "float32"), axis=1)
    source_piece = ops.logical_and(ops.not_equal(source_ids, PAD_ID),
                                   ops.not_equal(source_ids, EOS_ID))
    weights = ops.where(source_piece[:, None, :], weights, -1.0)  # weights are >= 0
    # One more column, never the largest where a piece is: argmax of an empty batch's [0, 0, 0].
    weights = ops.pad(weights, [[0, 0], [0, 0], [0, 1]], constant_values=-1.0)
    best = ops.cast(ops.argmax(weights, axis=-1), "int32")
    target_piece = ops.logical_and(
        ops.logical_and(ops.not_equal(tokens, PAD_ID), ops.not_equal(tokens, EOS_ID)),
        ops.any(source_piece, axis=1, keepdims=True))
    return ops.where(target_piece, best, NO_ALIGNMENT)


def pharaoh(indices):
    """"i-j" pairs, space-separated, one string per row of `indices` (int [batch, T] from
    `alignment_indices`): source position i of each target position j that has one, j
    ascending. A graph op (tf.string), as the export's signature returns it."""
    import tensorflow as tf

    indices = tf.convert_to_tensor(indices, tf.int32)
    target = tf.broadcast_to(tf.range(tf.shape(indices)[1])[tf.newaxis, :], tf.shape(indices))
    pairs = tf.strings.as_string(indices) + "-" + tf.strings.as_string(target)
    kept = tf.ragged.boolean_mask(pairs, indices != NO_ALIGNMENT)
    return tf.strings.reduce_join(kept, axis=1, separator=" ")


def pharaoh_text(row) -> str:
    """`pharaoh` of one row of indices, in Python (for searches run outside a TF graph)."""
    return " ".join(f"{int(i)}-{j}" for j, i in enumerate(row) if int(i) != NO_ALIGNMENT)


def parse_pharaoh(text: str) -> list[tuple[int, int]]:
    """(i, j) pairs of a Pharaoh string ("0-0 2-1"); "" is no pair."""
    pairs = []
    for pair in text.split():
        source, _, target = pair.partition("-")
        pairs.append((int(source), int(target)))
    return pairs

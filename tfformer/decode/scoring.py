"""Scoring given translations: log P(target | source) by teacher forcing, in `keras.ops` (any
backend; the SavedModel's `score` signature traces it too).

A target is scored as the search scores what it generates: the decoder reads BOS + the target's
pieces and each position's log-probability of the next piece, EOS last, is the log-softmax over
the whole vocabulary (PAD and BOS, which a search never takes, are not renormalized away), as
CTranslate2's `score_batch` gives it. So a greedy search's score of its output is that output's
score here, and a beam search's is `scores / lp(|Y|)`. An imported Marian model
(`TransformerConfig.bos_in_softmax` false) leaves the BOS column, which is not Marian's, out of
the softmax, as its loss does.

Per pair: `scores` (the sum), `normalized_scores` (the sum / |Y|, a mean per token: fairseq's
`--score-reference` and Marian's scorer with `--normalize` give it) and `token_scores` (|Y|
values, EOS's last), |Y| = the target's pieces + 1 (`lengths`).
"""

from __future__ import annotations

from typing import Sequence

from keras import ops

from tfformer.data.pieces import padded_rows
from tfformer.model.layers import kernels
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def max_target_pieces(transformer_config) -> int | None:
    """The longest target a model scores, in pieces: with learned positions, BOS + the pieces
    fill its max_length; sinusoids take any length (None), as the search's outputs do."""
    if transformer_config.positional != "learned":
        return None
    return transformer_config.max_length - 1


def token_log_probs(model, source_ids, target_ids):
    """Teacher-forced log-probabilities of each target piece and of EOS after it.

    Args:
        source_ids: int [batch, S], PAD-padded, EOS-terminated encoder inputs.
        target_ids: int [batch, T], each row a target's pieces (no BOS, no EOS), PAD after.

    Returns:
        (token_scores float32 [batch, T + 1]: position t of row b is log P(y_t | source, y_<t)
        for t < lengths[b], 0.0 after; lengths int32 [batch]: the pieces + 1, EOS counted).
    """
    target_ids = ops.cast(target_ids, "int32")
    batch = ops.shape(target_ids)[0]
    pieces = ops.sum(ops.cast(ops.not_equal(target_ids, PAD_ID), "int32"), axis=1)
    decoder_in = ops.concatenate([ops.full([batch, 1], BOS_ID, "int32"), target_ids], axis=1)
    positions = ops.expand_dims(ops.arange(ops.shape(decoder_in)[1], dtype="int32"), 0)
    at_end = ops.equal(positions, ops.expand_dims(pieces, 1))
    labels = ops.where(at_end, EOS_ID, ops.concatenate(
        [target_ids, ops.full([batch, 1], PAD_ID, "int32")], axis=1))
    logits = model((ops.cast(source_ids, "int32"), decoder_in), training=False)
    if not model.transformer_config.bos_in_softmax:
        logits = logits + ops.one_hot(BOS_ID, ops.shape(logits)[-1]) * kernels.masked_fill_value(
            "float32")
    # One fused log-softmax, then a gather: on TensorFlow faster than z_y - logsumexp(z),
    # whose reduction takes several passes over [batch, T + 1, vocab] (docs/results.md).
    log_probs = kernels.take_last_axis(ops.log_softmax(logits, axis=-1), labels)
    lengths = pieces + 1
    return ops.where(positions < ops.expand_dims(lengths, 1), log_probs, 0.0), lengths


def sequence_scores(token_scores, lengths):
    """(scores: the sum of each row, normalized_scores: the sum / its length)."""
    scores = ops.sum(token_scores, axis=1)
    return scores, scores / ops.cast(lengths, scores.dtype)


def score_texts(model, tokenizer, sources: Sequence[str], targets: Sequence[str]
                ) -> list[tuple[float, float, list[float]]]:
    """(score, normalized score, token scores) of each (source, target) pair, in order, on any
    backend: text goes through SentencePiece in Python (`tfformer.data.pieces`, or a
    `Tokenizer`'s `pieces`), so no TensorFlow is needed.

    Raises:
        ValueError: the lists differ in length, or a target is longer than the model scores
            (`max_target_pieces`), naming it.
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
    if not sources:
        return []
    pieces = getattr(tokenizer, "pieces", tokenizer)
    target_rows = pieces.encode(list(targets))
    limit = max_target_pieces(model.transformer_config)
    for index, row in enumerate(target_rows):
        if limit is not None and len(row) > limit:
            raise ValueError(f"target {index} is {len(row)} pieces long; the model scores at "
                             f"most {limit} (its max_length - 1)")
    token_scores, lengths = token_log_probs(model, pieces.encode_source(list(sources)),
                                            padded_rows(target_rows))
    scores, normalized = (ops.convert_to_numpy(x) for x in sequence_scores(token_scores,
                                                                           lengths))
    token_scores, lengths = ops.convert_to_numpy(token_scores), ops.convert_to_numpy(lengths)
    return [(float(scores[i]), float(normalized[i]), token_scores[i, :lengths[i]].tolist())
            for i in range(len(target_rows))]

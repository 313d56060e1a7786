"""Greedy search step by step in `keras.ops`, on any Keras backend: dev BLEU and sample
translations while training under JAX, where the in-graph search (`tfformer.decode.search`,
TensorFlow) cannot run the model.

The same rules as `tfformer.decode.search.greedy_search` (BOS first; PAD and BOS never generated; at
source length + max_output_extra only EOS; finished rows get PAD), one Python step per token,
with the decoder's fixed-capacity cache: every step has the same shapes, so JAX compiles each
op once rather than once per step. Text goes through SentencePiece in Python
(`tfformer.data.pieces`), so no TensorFlow is needed.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from keras import ops

from tfformer.decode.sampling import sample_np
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def greedy_search(model, source_ids: np.ndarray,
                  max_output_extra: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Greedy decoding of int [batch, S] PAD-padded, EOS-terminated source ids.

    Returns:
        (tokens int32 [batch, T] without BOS, EOS-terminated, PAD after; scores float32
        [batch], log P(Y)), as `tfformer.decode.search.greedy_search` gives them.
    """
    return _one_token_per_step(model, source_ids, max_output_extra,
                               lambda log_probs, t: log_probs.argmax(axis=-1))


def sample_search(model, source_ids: np.ndarray, temperature, top_k, top_p, seeds,
                  max_output_extra: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Sampling as `tfformer.decode.search.sample_search` does it, on the same random numbers
    (`tfformer.decode.sampling`): per sentence temperature (> 0), top_k (0: off), top_p (in
    (0, 1]; 1: off) and seed (>= 0), arrays of [batch].

    Returns:
        (tokens, scores) as `greedy_search`; scores are the model's log P(Y) of the sample.
    """
    batch = len(source_ids)
    parameters = [np.broadcast_to(np.asarray(value, dtype), [batch]) for value, dtype in
                  ((temperature, np.float32), (top_k, np.int32), (top_p, np.float32),
                   (seeds, np.int64))]
    return _one_token_per_step(model, source_ids, max_output_extra,
                               lambda log_probs, t: sample_np(log_probs, *parameters, t))


def _one_token_per_step(model, source_ids, max_output_extra, choose):
    source_ids = np.asarray(source_ids, np.int32)
    batch = source_ids.shape[0]
    max_lengths = np.maximum((source_ids != PAD_ID).sum(axis=1) + max_output_extra, 1)
    if model.transformer_config.positional == "learned":
        max_lengths = np.minimum(max_lengths, model.transformer_config.max_length)
    memory, source_mask = model.encode(source_ids, training=False)
    cache = model.init_cache(memory, capacity=int(max_lengths.max()))
    tokens = np.full([batch, 1], BOS_ID, np.int32)
    scores = np.zeros([batch], np.float32)
    finished = np.zeros([batch], bool)
    vocab = np.arange(model.transformer_config.vocab_size)
    never = (vocab == PAD_ID) | (vocab == BOS_ID)
    for t in range(int(max_lengths.max())):
        logits, cache = model.decode(tokens[:, -1:], None, source_mask, cache=cache,
                                     cache_index=t, training=False)
        log_probs = ops.convert_to_numpy(ops.log_softmax(logits[:, -1, :], axis=-1))
        at_limit = (t + 1 >= max_lengths)[:, None]
        log_probs = np.where(never | (at_limit & (vocab != EOS_ID)), -1e9, log_probs)
        chosen = choose(log_probs, t).astype(np.int32)
        scores += np.where(finished, 0.0, log_probs[np.arange(batch), chosen])
        chosen = np.where(finished, PAD_ID, chosen)
        finished |= chosen == EOS_ID
        tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
        if finished.all():
            break
    return tokens[:, 1:], scores


def translate_texts(model, tokenizer, sentences: Sequence[str],
                    max_output_extra: int = 50) -> list[tuple[str, float]]:
    """(translation, log P) of each sentence by greedy search, in order.

    `tokenizer`: a `tfformer.data.pieces.SentencePieces`, or a `Tokenizer` (its `pieces`):
    text is encoded and decoded in Python, so this runs where TensorFlow is not installed.
    """
    if not sentences:
        return []
    pieces = getattr(tokenizer, "pieces", tokenizer)
    tokens, scores = greedy_search(model, pieces.encode_source(sentences), max_output_extra)
    return list(zip(pieces.decode(tokens), (float(score) for score in scores)))

"""Greedy, beam and sampling search step by step in `keras.ops`, on any Keras backend: dev BLEU,
`tfformer-evaluate` and sample translations where the in-graph search (`tfformer.decode.search`,
TensorFlow) cannot run the model (JAX, with or without TensorFlow installed).

The same rules as `tfformer.decode.search` (BOS first; PAD and BOS never generated; at source
length + max_output_extra only EOS; finished rows get PAD; beam search's ranks, end rule and
length penalty), token-identical on the same weights, one Python step per token,
with the decoder's fixed-capacity cache: every step has the same shapes, so JAX compiles each
op once rather than once per step. Text goes through SentencePiece in Python
(`tfformer.data.pieces`), so no TensorFlow is needed.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from keras import ops, tree

from tfformer.decode.sampling import sample_np
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

_NEG_INF = -1e9  # as tfformer.decode.search's: finite, so -inf - -inf never makes a NaN


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


def _max_output_lengths(model, source_ids: np.ndarray, max_output_extra: int) -> np.ndarray:
    """[batch] maximum |Y| per sentence, as `tfformer.decode.search._max_output_lengths`."""
    max_lengths = np.maximum((source_ids != PAD_ID).sum(axis=1) + max_output_extra, 1)
    if model.transformer_config.positional == "learned":
        max_lengths = np.minimum(max_lengths, model.transformer_config.max_length)
    return max_lengths


def _step_log_probs(model, last_tokens, source_mask, cache, t: int, max_lengths: np.ndarray):
    """The next token's log-probabilities [rows, vocab] under the search rules (PAD and BOS
    never, only EOS at a row's length limit), and the cache written at position t."""
    logits, cache = model.decode(last_tokens, None, source_mask, cache=cache, cache_index=t,
                                 training=False)
    log_probs = ops.convert_to_numpy(ops.log_softmax(logits[:, -1, :], axis=-1))
    vocab = np.arange(log_probs.shape[-1])
    never = (vocab == PAD_ID) | (vocab == BOS_ID)
    at_limit = (t + 1 >= max_lengths)[:, None]
    return np.where(never | (at_limit & (vocab != EOS_ID)), _NEG_INF, log_probs), cache


def _top(values: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices) of the `count` largest of each row, ties to the lower index: what
    tf.math.top_k returns."""
    indices = np.argsort(-values, axis=-1, kind="stable")[..., :count]
    return np.take_along_axis(values, indices, axis=-1), indices


def length_penalty(length, alpha: float) -> np.ndarray:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha in float32 (§6.1; `tfformer.decode.search`'s)."""
    return np.power((np.float32(5) + np.asarray(length, np.float32)) / np.float32(6),
                    np.float32(alpha))


def beam_search(model, source_ids: np.ndarray, beam_size: int = 4, alpha: float = 0.6,
                max_output_extra: int = 50, n_best: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Beam search with the length penalty of §6.1, by the rules and in the rank order of
    `tfformer.decode.search.beam_search` (token-identical on the same weights), one step at a
    time with the fixed-capacity cache: any Keras backend.

    Returns:
        (tokens int32 [batch, n_best, T] without BOS, EOS-terminated, PAD after; scores float32
        [batch, n_best], log P(Y) / lp(Y)), best first.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and beam_size ({beam_size}), got {n_best}")
    k = beam_size
    if model.transformer_config.vocab_size < 2 * k:
        raise ValueError(f"beam_size {k} needs a vocabulary of at least {2 * k} ids")
    source_ids = np.asarray(source_ids, np.int32)
    batch = source_ids.shape[0]
    max_lengths = _max_output_lengths(model, source_ids, max_output_extra)
    best_possible_lp = length_penalty(max_lengths, alpha)
    memory, source_mask = model.encode(source_ids, training=False)
    copies = lambda x: ops.repeat(x, k, axis=0)  # noqa: E731  row b*k+i = sentence b, beam i
    source_mask = copies(source_mask)
    cache = tree.map_structure(copies, model.init_cache(memory,
                                                        capacity=int(max_lengths.max())))
    row_max_lengths = np.repeat(max_lengths, k)
    positions = np.arange(2 * k)[None]
    # Only beam 0 is live at the start, so the first step does not pick k copies of one token.
    alive = np.full([batch, k, 1], BOS_ID, np.int32)
    alive_log_probs = np.tile(np.array([0.0] + [_NEG_INF] * (k - 1), np.float32), [batch, 1])
    finished = np.full([batch, k, 1], BOS_ID, np.int32)
    finished_scores = np.full([batch, k], _NEG_INF, np.float32)
    done = np.zeros([batch], bool)
    for t in range(int(max_lengths.max())):
        log_probs, cache = _step_log_probs(model, alive[:, :, -1].reshape(-1, 1), source_mask,
                                           cache, t, row_max_lengths)
        vocab = log_probs.shape[-1]
        candidates = (alive_log_probs[:, :, None] + log_probs.reshape(batch, k, vocab))
        top_log_probs, top_indices = _top(candidates.reshape(batch, k * vocab), 2 * k)
        top_beams, top_tokens = top_indices // vocab, top_indices % vocab
        ends = top_tokens == EOS_ID
        top_sequences = np.concatenate(
            [np.take_along_axis(alive, top_beams[:, :, None], axis=1),
             top_tokens[:, :, None].astype(np.int32)], axis=2)
        # The first k candidates without EOS stay alive, in rank order.
        alive_log_probs, keep = _top(np.where(ends, np.float32(_NEG_INF), top_log_probs), k)
        alive = np.take_along_axis(top_sequences, keep[:, :, None], axis=1)
        rows = np.take_along_axis(top_beams, keep, axis=1) + (np.arange(batch) * k)[:, None]
        cache = model.reorder_cache(cache, ops.convert_to_tensor(rows.reshape(-1), "int32"))
        # EOS among the top k finishes a hypothesis, unless its sentence is already done.
        eligible = ends & (positions < k) & (top_log_probs > _NEG_INF / 2) & ~done[:, None]
        new_scores = np.where(eligible, top_log_probs / length_penalty(t + 1, alpha),
                              np.float32(_NEG_INF)).astype(np.float32)
        padded = np.pad(finished, [(0, 0), (0, 0), (0, 1)], constant_values=PAD_ID)
        finished_scores, best = _top(np.concatenate([finished_scores, new_scores], axis=1), k)
        finished = np.take_along_axis(np.concatenate([padded, top_sequences], axis=1),
                                      best[:, :, None], axis=1)
        # Done: k finished and no alive hypothesis can still beat the worst of them.
        full = finished_scores[:, -1] > _NEG_INF / 2
        hopeless = alive_log_probs[:, 0] / best_possible_lp <= finished_scores[:, -1]
        done |= (t + 1 >= max_lengths) | (full & hopeless)
        if done.all():
            break
    return finished[:, :n_best, 1:], finished_scores[:, :n_best]


def _one_token_per_step(model, source_ids, max_output_extra, choose):
    source_ids = np.asarray(source_ids, np.int32)
    batch = source_ids.shape[0]
    max_lengths = _max_output_lengths(model, source_ids, max_output_extra)
    memory, source_mask = model.encode(source_ids, training=False)
    cache = model.init_cache(memory, capacity=int(max_lengths.max()))
    tokens = np.full([batch, 1], BOS_ID, np.int32)
    scores = np.zeros([batch], np.float32)
    finished = np.zeros([batch], bool)
    for t in range(int(max_lengths.max())):
        log_probs, cache = _step_log_probs(model, tokens[:, -1:], source_mask, cache, t,
                                           max_lengths)
        chosen = choose(log_probs, t).astype(np.int32)
        scores += np.where(finished, 0.0, log_probs[np.arange(batch), chosen])
        chosen = np.where(finished, PAD_ID, chosen)
        finished |= chosen == EOS_ID
        tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
        if finished.all():
            break
    return tokens[:, 1:], scores


def translate_texts(model, tokenizer, sentences: Sequence[str], max_output_extra: int = 50,
                    beam_size: int = 1, alpha: float = 0.6) -> list[tuple[str, float]]:
    """(translation, score) of each sentence, in order: greedy search (score log P(Y)) for
    beam_size 1, else beam search (log P(Y) / lp(Y)).

    `tokenizer`: a `tfformer.data.pieces.SentencePieces`, or a `Tokenizer` (its `pieces`):
    text is encoded and decoded in Python, so this runs where TensorFlow is not installed.
    """
    if not sentences:
        return []
    pieces = getattr(tokenizer, "pieces", tokenizer)
    source_ids = pieces.encode_source(sentences)
    if beam_size == 1:
        tokens, scores = greedy_search(model, source_ids, max_output_extra)
    else:
        tokens, scores = beam_search(model, source_ids, beam_size, alpha, max_output_extra)
        tokens, scores = tokens[:, 0], scores[:, 0]
    return list(zip(pieces.decode(tokens), (float(score) for score in scores)))

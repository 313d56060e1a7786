"""Greedy and beam search (§6.1) in TensorFlow graph ops, one `tf.while_loop`, no Python per step.

The encoder runs once. With `use_cache=True` (the default) the cross-attention keys/values are
projected once and each step feeds only the newest token through the decoder, whose
self-attention cache grows by one position per step and is reordered by beam. With
`use_cache=False` every step recomputes the decoder over the whole prefix (for tests and
benchmarks; same tokens, much slower).

Rules shared by both searches (and by the NumPy reference in tests/test_search.py):
- a hypothesis starts with BOS; |Y| counts the generated tokens, EOS included; PAD and BOS are
  never generated;
- the maximum output length of sentence b is (its source tokens) + max_output_extra: at that
  step every token but EOS is forbidden, so each hypothesis ends with EOS;
- beam search (as fairseq): the 2k best continuations are ranked by log-probability; the k
  best of them that do not end in EOS stay alive; those among the top k that end in EOS are
  finished with score log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6) ** alpha, and the k best
  finished hypotheses are kept;
- a sentence is done when it has k finished hypotheses and no alive one can beat the worst of
  them (log-probabilities only fall, so an alive score is at most logP / lp(max length)), or at
  its maximum length; the loop exits once every sentence is done.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

_NEG_INF = -1e9  # finite, so that -inf - -inf never makes a NaN score


class SearchResult(NamedTuple):
    """Search output, best hypothesis first.

    tokens: int32 [batch, n_best, T], generated ids without BOS, EOS-terminated, PAD after.
    scores: float32 [batch, n_best], log P(Y) / lp(Y) (greedy: log P(Y)).
    """

    tokens: tf.Tensor
    scores: tf.Tensor


def length_penalty(length: tf.Tensor, alpha: float) -> tf.Tensor:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, used in §6.1)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _max_output_lengths(model, source_ids: tf.Tensor, max_output_extra: int) -> tf.Tensor:
    """[batch] maximum |Y| per sentence: its source length + extra, within the model's positions."""
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    lengths = source_lengths + max_output_extra
    if model.transformer_config.positional == "learned":
        # The decoder input is BOS + |Y| - 1 tokens: it must fit the learned positions.
        lengths = tf.minimum(lengths, model.transformer_config.max_length)
    return tf.maximum(lengths, 1)


class _TokenRules:
    """PAD and BOS are never generated; at a hypothesis' length limit, only EOS is.

    The vocabulary masks are made once, outside the decoding loop.
    """

    def __init__(self, vocab_size: int):
        ids = tf.range(vocab_size)
        self.never = tf.logical_or(tf.equal(ids, PAD_ID), tf.equal(ids, BOS_ID))
        self.not_eos = tf.not_equal(ids, EOS_ID)

    def __call__(self, log_probs: tf.Tensor, at_limit: tf.Tensor) -> tf.Tensor:
        """`at_limit` has log_probs' shape without the vocabulary axis."""
        forbidden = tf.logical_or(
            self.never, tf.logical_and(at_limit[..., tf.newaxis], self.not_eos))
        return tf.where(forbidden, tf.cast(_NEG_INF, log_probs.dtype), log_probs)


class _Decoder:
    """next-token log-probabilities for [rows, t] prefixes, with or without the cache."""

    def __init__(self, model, source_ids: tf.Tensor, copies: int, use_cache: bool):
        self.model = model
        self.use_cache = use_cache
        memory, source_mask = model.encode(source_ids, training=False)
        repeat = lambda x: tf.repeat(x, copies, axis=0)  # noqa: E731  row b*copies+i = sentence b
        self.source_mask = repeat(source_mask)
        if use_cache:
            # Cross-attention keys/values: projected once per sentence, then copied per beam.
            self.initial_state = tf.nest.map_structure(repeat, model.init_cache(memory))
            self.memory = None
        else:
            self.initial_state = []
            self.memory = repeat(memory)

    def state_shape_invariants(self, state):
        return tf.nest.map_structure(lambda x: tf.TensorShape([None] * x.shape.rank), state)

    def __call__(self, prefixes: tf.Tensor, state):
        if self.use_cache:
            logits, state = self.model.decode(prefixes[:, -1, tf.newaxis], None, self.source_mask,
                                              cache=state, training=False)
        else:
            logits = self.model.decode(prefixes, self.memory, self.source_mask, training=False)
        return tf.nn.log_softmax(logits[:, -1, :]), state

    def reorder(self, state, rows: tf.Tensor):
        """Keeps the cache rows `rows` (one per new beam); the model knows the cache's layout."""
        if not self.use_cache:
            return state
        return self.model.reorder_cache(state, rows)


# do_not_convert: both searches are graph ops (one tf.while_loop); a tf.function that calls them
# traces them as they are, without autograph rewriting their Python (or the model's) on the way.
@do_not_convert
def greedy_search(model, source_ids: tf.Tensor, max_output_extra: int = 50,
                  use_cache: bool = True) -> SearchResult:
    """Picks the most probable token at each step.

    Args:
        model: a `Transformer`.
        source_ids: int [batch, S], EOS-terminated and PAD-padded.
        max_output_extra: maximum output length = source length + this.
        use_cache: use the incremental key/value cache (else recompute the whole prefix).

    Returns:
        SearchResult with n_best = 1; scores are log P(Y).
    """
    source_ids = tf.cast(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    max_lengths = _max_output_lengths(model, source_ids, max_output_extra)
    decoder = _Decoder(model, source_ids, 1, use_cache)
    allowed = _TokenRules(model.transformer_config.vocab_size)

    def body(t, prefixes, scores, finished, state):
        log_probs, state = decoder(prefixes, state)
        log_probs = allowed(log_probs, t + 1 >= max_lengths)
        tokens = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token_log_probs = tf.gather(log_probs, tokens, batch_dims=1)
        scores += tf.where(finished, 0.0, token_log_probs)
        tokens = tf.where(finished, PAD_ID, tokens)
        finished = tf.logical_or(finished, tf.equal(tokens, EOS_ID))
        return t + 1, tf.concat([prefixes, tokens[:, tf.newaxis]], 1), scores, finished, state

    loop_vars = (tf.constant(0), tf.fill([batch, 1], BOS_ID), tf.zeros([batch]),
                 tf.zeros([batch], tf.bool), decoder.initial_state)
    _, prefixes, scores, _, _ = tf.while_loop(
        lambda t, prefixes, scores, finished, state: tf.logical_not(tf.reduce_all(finished)),
        body, loop_vars,
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None]), tf.TensorShape([None]),
                          decoder.state_shape_invariants(decoder.initial_state)))
    return SearchResult(prefixes[:, tf.newaxis, 1:], scores[:, tf.newaxis])


@do_not_convert
def beam_search(model, source_ids: tf.Tensor, beam_size: int = 4, alpha: float = 0.6,
                max_output_extra: int = 50, n_best: int = 1,
                use_cache: bool = True) -> SearchResult:
    """Beam search with the GNMT length penalty (§6.1: k = 4, alpha = 0.6).

    Args:
        model: a `Transformer`.
        source_ids: int [batch, S], EOS-terminated and PAD-padded.
        beam_size: k.
        alpha: length penalty exponent; 0 ranks by log P(Y) alone.
        max_output_extra: maximum output length = source length + this.
        n_best: hypotheses to return per sentence (<= k).
        use_cache: use the incremental key/value cache (else recompute the whole prefix).

    Returns:
        SearchResult with the n_best finished hypotheses per sentence, best first.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and beam_size ({beam_size}), got {n_best}")
    k = beam_size
    if model.transformer_config.vocab_size < 2 * k:
        raise ValueError(f"beam_size {k} needs a vocabulary of at least {2 * k} ids")
    source_ids = tf.cast(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    max_lengths = _max_output_lengths(model, source_ids, max_output_extra)
    best_possible_lp = length_penalty(max_lengths, alpha)  # [batch]
    decoder = _Decoder(model, source_ids, k, use_cache)
    allowed = _TokenRules(model.transformer_config.vocab_size)
    batch_offsets = (tf.range(batch) * k)[:, tf.newaxis]
    neg_inf = tf.constant(_NEG_INF)

    def body(t, alive, alive_log_probs, finished, finished_scores, done, state):
        log_probs, state = decoder(tf.reshape(alive, [batch * k, -1]), state)
        vocab = tf.shape(log_probs)[-1]
        log_probs = tf.reshape(log_probs, [batch, k, vocab])
        log_probs = allowed(log_probs, tf.broadcast_to((t + 1 >= max_lengths)[:, None],
                                                       [batch, k]))
        candidates = tf.reshape(alive_log_probs[:, :, None] + log_probs, [batch, k * vocab])
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * k)  # [batch, 2k]
        top_beams, top_tokens = top_indices // vocab, top_indices % vocab
        top_sequences = tf.concat([tf.gather(alive, top_beams, batch_dims=1),
                                   top_tokens[:, :, None]], axis=2)
        ends = tf.equal(top_tokens, EOS_ID)

        # The k best continuations without EOS stay alive.
        alive_log_probs, keep = tf.math.top_k(tf.where(ends, neg_inf, top_log_probs), k=k)
        alive = tf.gather(top_sequences, keep, batch_dims=1)
        state = decoder.reorder(state, tf.reshape(
            tf.gather(top_beams, keep, batch_dims=1) + batch_offsets, [-1]))

        # EOS among the top k finishes a hypothesis, unless its sentence is already done.
        eligible = ends & (tf.range(2 * k)[tf.newaxis] < k) & (top_log_probs > neg_inf / 2)
        eligible = tf.logical_and(eligible, tf.logical_not(done)[:, None])
        new_scores = tf.where(eligible, top_log_probs / length_penalty(t + 1, alpha), neg_inf)
        padded_finished = tf.pad(finished, [[0, 0], [0, 0], [0, 1]], constant_values=PAD_ID)
        finished_scores, best = tf.math.top_k(
            tf.concat([finished_scores, new_scores], axis=1), k=k)
        finished = tf.gather(tf.concat([padded_finished, top_sequences], axis=1), best,
                             batch_dims=1)

        # Done: k finished and no alive hypothesis can still beat the worst of them.
        full = finished_scores[:, -1] > neg_inf / 2
        hopeless = alive_log_probs[:, 0] / best_possible_lp <= finished_scores[:, -1]
        done = done | (t + 1 >= max_lengths) | (full & hopeless)
        return t + 1, alive, alive_log_probs, finished, finished_scores, done, state

    # Only beam 0 is live at the start, so the first step does not pick k copies of one token.
    initial_log_probs = tf.tile(tf.concat([[0.0], tf.fill([k - 1], _NEG_INF)], 0)[None],
                                [batch, 1])
    loop_vars = (tf.constant(0), tf.fill([batch, k, 1], BOS_ID), initial_log_probs,
                 tf.fill([batch, k, 1], BOS_ID), tf.fill([batch, k], _NEG_INF),
                 tf.zeros([batch], tf.bool), decoder.initial_state)
    sequence_shape = tf.TensorShape([None, k, None])
    _, _, _, finished, finished_scores, _, _ = tf.while_loop(
        lambda t, *rest: tf.logical_not(tf.reduce_all(rest[4])),
        body, loop_vars,
        shape_invariants=(tf.TensorShape([]), sequence_shape, tf.TensorShape([None, k]),
                          sequence_shape, tf.TensorShape([None, k]), tf.TensorShape([None]),
                          decoder.state_shape_invariants(decoder.initial_state)))
    return SearchResult(finished[:, :n_best, 1:], finished_scores[:, :n_best])

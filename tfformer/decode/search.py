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

Options of every search:
- no_repeat_ngram = n > 0 forbids a token that would repeat an n-gram of the hypothesis'
  generated tokens (a forced prefix's included), as CTranslate2's `no_repeat_ngram_size` does:
  the forbidden ids are removed before the softmax, so the allowed ones are renormalized;
- a forced target prefix (ids [batch, P], PAD-padded): at step t < P_b sentence b takes its
  prefix's t-th id at log-probability 0, so its score is that of the continuation (|Y| counts
  the continuation); its maximum length grows by P_b. As CTranslate2's `target_prefix` does,
  beam search then finishes no hypothesis but the best at the first free step (an EOS ranked
  below it becomes a dead beam), which keeps a short ending from crowding out the beam.
Sampling (`sample_search`) follows greedy search's loop with `tfformer.decode.sampling` choosing
the token; its score is the model's log P(Y), not the tempered one.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.decode import sampling
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


def _max_output_lengths(model, source_ids: tf.Tensor, max_output_extra: int,
                        prefix_lengths: tf.Tensor | None = None) -> tf.Tensor:
    """[batch] maximum |Y| per sentence: its source length + extra (+ its forced prefix), within
    the model's positions."""
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    lengths = source_lengths + max_output_extra
    if prefix_lengths is not None:
        lengths += prefix_lengths
    if model.transformer_config.positional == "learned":
        # The decoder input is BOS + |Y| - 1 tokens: it must fit the learned positions.
        lengths = tf.minimum(lengths, model.transformer_config.max_length)
    return tf.maximum(lengths, 1)


def repeated_ngram_tokens(generated: tf.Tensor, n: int, vocab_size: int) -> tf.Tensor:
    """bool [rows, vocab]: the ids that would complete an n-gram already in `generated` int
    [rows, L] (the hypothesis without BOS): every token that followed an occurrence of the last
    n - 1 tokens (for n = 1, every token so far)."""
    rows, length = tf.shape(generated)[0], tf.shape(generated)[1]
    # -1 before the first token: a window that reaches before it matches nothing.
    padded = tf.pad(generated, [[0, 0], [n - 1, 0]], constant_values=-1)
    match = tf.ones([rows, length], tf.bool)
    for j in range(n - 1):  # window i (i < L) holds padded[i : i + n - 1], followed by generated[i]
        match &= tf.equal(padded[:, j:j + length], padded[:, length + j:length + j + 1])
    where = tf.where(match)
    indices = tf.stack([where[:, 0], tf.cast(tf.gather_nd(generated, where), tf.int64)], axis=1)
    hits = tf.scatter_nd(indices, tf.ones(tf.shape(where)[:1], tf.int32),
                         tf.cast(tf.stack([rows, vocab_size]), tf.int64))
    return hits > 0


class _TokenRules:
    """PAD and BOS are never generated; at a hypothesis' length limit, only EOS is; with
    no_repeat_ngram, no repeated n-gram; a forced prefix token is taken.

    The vocabulary masks are made once, outside the decoding loop.
    """

    def __init__(self, vocab_size: int, no_repeat_ngram: int = 0):
        if isinstance(no_repeat_ngram, bool) or not isinstance(no_repeat_ngram, int) \
                or no_repeat_ngram < 0:
            raise ValueError(f"no_repeat_ngram must be an integer >= 0, got {no_repeat_ngram!r}")
        ids = tf.range(vocab_size)
        self.ids = ids
        self.vocab_size = vocab_size
        self.no_repeat_ngram = no_repeat_ngram
        self.never = tf.logical_or(tf.equal(ids, PAD_ID), tf.equal(ids, BOS_ID))
        self.not_eos = tf.not_equal(ids, EOS_ID)

    def __call__(self, log_probs: tf.Tensor, at_limit: tf.Tensor,
                 generated: tf.Tensor | None = None, forced: tf.Tensor | None = None) -> tf.Tensor:
        """log_probs [rows, vocab]; at_limit bool [rows]; generated int [rows, L], the tokens so
        far (no_repeat_ngram); forced int [rows], the id to take, -1 for none."""
        neg_inf = tf.cast(_NEG_INF, log_probs.dtype)
        if self.no_repeat_ngram:
            banned = repeated_ngram_tokens(generated, self.no_repeat_ngram, self.vocab_size)
            log_probs = tf.nn.log_softmax(tf.where(banned, neg_inf, log_probs))
        forbidden = tf.logical_or(
            self.never, tf.logical_and(at_limit[..., tf.newaxis], self.not_eos))
        log_probs = tf.where(forbidden, neg_inf, log_probs)
        if forced is not None:
            taken = tf.where(tf.equal(self.ids[None, :], forced[:, None]),
                             tf.zeros([], log_probs.dtype), neg_inf)
            log_probs = tf.where((forced >= 0)[:, None], taken, log_probs)
        return log_probs


class _Prefix:
    """A forced target prefix: ids int [batch, P] (PAD-padded, no BOS or EOS)."""

    def __init__(self, prefix_ids: tf.Tensor):
        prefix_ids = tf.cast(prefix_ids, tf.int32)
        self.lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_ids, PAD_ID), tf.int32), axis=1)
        self._ids = tf.pad(prefix_ids, [[0, 0], [0, 1]])  # column P: a step past every prefix

    def forced(self, t: tf.Tensor) -> tf.Tensor:
        """int [batch]: the id sentence b must take at step t, -1 once its prefix is done."""
        column = tf.minimum(t, tf.shape(self._ids)[1] - 1)
        return tf.where(t < self.lengths, self._ids[:, column], -1)


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


def _one_token_per_step(model, source_ids, max_output_extra, use_cache, no_repeat_ngram,
                        prefix_ids, choose) -> SearchResult:
    """Greedy search's loop, with `choose(log_probs, t)` picking each step's token."""
    source_ids = tf.cast(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    prefix = None if prefix_ids is None else _Prefix(prefix_ids)
    max_lengths = _max_output_lengths(model, source_ids, max_output_extra,
                                      None if prefix is None else prefix.lengths)
    decoder = _Decoder(model, source_ids, 1, use_cache)
    rules = _TokenRules(model.transformer_config.vocab_size, no_repeat_ngram)

    def body(t, sequences, scores, finished, state):
        log_probs, state = decoder(sequences, state)
        log_probs = rules(log_probs, t + 1 >= max_lengths,
                          sequences[:, 1:] if no_repeat_ngram else None,
                          None if prefix is None else prefix.forced(t))
        tokens = choose(log_probs, t)
        token_log_probs = tf.gather(log_probs, tokens, batch_dims=1)
        scores += tf.where(finished, 0.0, token_log_probs)
        tokens = tf.where(finished, PAD_ID, tokens)
        finished = tf.logical_or(finished, tf.equal(tokens, EOS_ID))
        return t + 1, tf.concat([sequences, tokens[:, tf.newaxis]], 1), scores, finished, state

    loop_vars = (tf.constant(0), tf.fill([batch, 1], BOS_ID), tf.zeros([batch]),
                 tf.zeros([batch], tf.bool), decoder.initial_state)
    _, sequences, scores, _, _ = tf.while_loop(
        lambda t, sequences, scores, finished, state: tf.logical_not(tf.reduce_all(finished)),
        body, loop_vars,
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None]), tf.TensorShape([None]),
                          decoder.state_shape_invariants(decoder.initial_state)))
    return SearchResult(sequences[:, tf.newaxis, 1:], scores[:, tf.newaxis])


# do_not_convert: the searches are graph ops (one tf.while_loop); a tf.function that calls them
# traces them as they are, without autograph rewriting their Python (or the model's) on the way.
@do_not_convert
def greedy_search(model, source_ids: tf.Tensor, max_output_extra: int = 50,
                  use_cache: bool = True, *, no_repeat_ngram: int = 0,
                  prefix_ids: tf.Tensor | None = None) -> SearchResult:
    """Picks the most probable token at each step.

    Args:
        model: a `Transformer`.
        source_ids: int [batch, S], EOS-terminated and PAD-padded.
        max_output_extra: maximum output length = source length + this.
        use_cache: use the incremental key/value cache (else recompute the whole prefix).
        no_repeat_ngram: n > 0 forbids repeating an n-gram (module docstring).
        prefix_ids: int [batch, P], PAD-padded: a forced target prefix per sentence.

    Returns:
        SearchResult with n_best = 1; scores are log P(Y) (of the continuation of a prefix).
    """
    return _one_token_per_step(
        model, source_ids, max_output_extra, use_cache, no_repeat_ngram, prefix_ids,
        lambda log_probs, t: tf.argmax(log_probs, axis=-1, output_type=tf.int32))


@do_not_convert
def sample_search(model, source_ids: tf.Tensor, temperature: tf.Tensor, top_k: tf.Tensor,
                  top_p: tf.Tensor, seeds: tf.Tensor, max_output_extra: int = 50,
                  use_cache: bool = True, *, no_repeat_ngram: int = 0,
                  prefix_ids: tf.Tensor | None = None) -> SearchResult:
    """Draws each token from the model's distribution (`tfformer.decode.sampling.sample`).

    Args:
        model, source_ids, max_output_extra, use_cache, no_repeat_ngram, prefix_ids: as for
            `greedy_search`.
        temperature: float [batch] > 0; top_k: int [batch] >= 0 (0: off); top_p: float
            [batch] in (0, 1] (1: off); seeds: int64 [batch] >= 0, each sentence's own.
            Their values are not checked here (the export checks them).

    Returns:
        SearchResult with n_best = 1; scores are the model's log P(Y) of the sample.
    """
    temperature = tf.cast(temperature, tf.float32)
    top_k = tf.cast(top_k, tf.int32)
    top_p = tf.cast(top_p, tf.float32)
    seeds = tf.cast(seeds, tf.int64)
    return _one_token_per_step(
        model, source_ids, max_output_extra, use_cache, no_repeat_ngram, prefix_ids,
        lambda log_probs, t: sampling.sample(log_probs, temperature, top_k, top_p, seeds, t))


@do_not_convert
def beam_search(model, source_ids: tf.Tensor, beam_size: int = 4, alpha: float = 0.6,
                max_output_extra: int = 50, n_best: int = 1,
                use_cache: bool = True, *, no_repeat_ngram: int = 0,
                prefix_ids: tf.Tensor | None = None) -> SearchResult:
    """Beam search with the GNMT length penalty (§6.1: k = 4, alpha = 0.6).

    Args:
        model: a `Transformer`.
        source_ids: int [batch, S], EOS-terminated and PAD-padded.
        beam_size: k.
        alpha: length penalty exponent; 0 ranks by log P(Y) alone.
        max_output_extra: maximum output length = source length + this.
        n_best: hypotheses to return per sentence (<= k).
        use_cache: use the incremental key/value cache (else recompute the whole prefix).
        no_repeat_ngram: n > 0 forbids repeating an n-gram (module docstring).
        prefix_ids: int [batch, P], PAD-padded: a forced target prefix per sentence.

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
    prefix = None if prefix_ids is None else _Prefix(prefix_ids)
    prefix_lengths = tf.zeros([batch], tf.int32) if prefix is None else prefix.lengths
    max_lengths = _max_output_lengths(model, source_ids, max_output_extra, prefix_lengths)
    # |Y| of the length penalty counts what the search generated, not a forced prefix.
    best_possible_lp = length_penalty(max_lengths - prefix_lengths, alpha)  # [batch]
    decoder = _Decoder(model, source_ids, k, use_cache)
    rules = _TokenRules(model.transformer_config.vocab_size, no_repeat_ngram)
    batch_offsets = (tf.range(batch) * k)[:, tf.newaxis]
    neg_inf = tf.constant(_NEG_INF)
    positions = tf.range(2 * k)[tf.newaxis]
    per_row = lambda x: tf.repeat(x, k, axis=0)  # noqa: E731  [batch] -> [batch * k]
    row_max_lengths = per_row(max_lengths)

    def body(t, alive, alive_log_probs, finished, finished_scores, done, state):
        rows = tf.reshape(alive, [batch * k, -1])
        log_probs, state = decoder(rows, state)
        log_probs = rules(log_probs, t + 1 >= row_max_lengths,
                          rows[:, 1:] if no_repeat_ngram else None,
                          None if prefix is None else per_row(prefix.forced(t)))
        vocab = tf.shape(log_probs)[-1]
        log_probs = tf.reshape(log_probs, [batch, k, vocab])
        candidates = tf.reshape(alive_log_probs[:, :, None] + log_probs, [batch, k * vocab])
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * k)  # [batch, 2k]
        top_beams, top_tokens = top_indices // vocab, top_indices % vocab
        ends = tf.equal(top_tokens, EOS_ID)
        if prefix is not None:
            # The first step after a prefix finishes only its best candidate (CTranslate2's
            # rule): an EOS ranked below it becomes a dead beam, in its place.
            first_free = tf.logical_and(tf.equal(t, prefix_lengths), prefix_lengths > 0)
            dropped = ends & first_free[:, None] & (positions > 0)
            top_log_probs = tf.where(dropped, neg_inf, top_log_probs)
            top_tokens = tf.where(dropped, PAD_ID, top_tokens)
            ends = ends & tf.logical_not(dropped)
        top_sequences = tf.concat([tf.gather(alive, top_beams, batch_dims=1),
                                   top_tokens[:, :, None]], axis=2)

        # The first k candidates without EOS stay alive, in rank order (after a prefix, a
        # dead beam keeps its rank, as in CTranslate2).
        if prefix is None:
            alive_log_probs, keep = tf.math.top_k(tf.where(ends, neg_inf, top_log_probs), k=k)
        else:
            _, keep = tf.math.top_k(tf.where(ends, -1, 2 * k - positions), k=k)
            alive_log_probs = tf.gather(top_log_probs, keep, batch_dims=1)
        alive = tf.gather(top_sequences, keep, batch_dims=1)
        state = decoder.reorder(state, tf.reshape(
            tf.gather(top_beams, keep, batch_dims=1) + batch_offsets, [-1]))

        # EOS among the top k finishes a hypothesis, unless its sentence is already done.
        eligible = ends & (positions < k) & (top_log_probs > neg_inf / 2)
        eligible = tf.logical_and(eligible, tf.logical_not(done)[:, None])
        generated = t + 1 if prefix is None else (t + 1 - prefix_lengths)[:, None]
        new_scores = tf.where(eligible, top_log_probs / length_penalty(generated, alpha),
                              neg_inf)
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

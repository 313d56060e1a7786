"""Greedy, sampling and beam search (§6.1) in TensorFlow graph ops, one `tf.while_loop`, no Python
per step: the searches the SavedModel saves (stock TF Serving runs them, without XLA). Called
eagerly, a search runs that graph too, traced once per model and options (`_as_graph`).

The encoder runs once. With `use_cache=True` (the default) the cross-attention keys/values are
projected once and each step feeds only the newest token through the decoder, whose
self-attention cache grows by one position per step and is reordered by beam. With
`use_cache=False` every step recomputes the decoder over the whole prefix (for tests and
benchmarks; same tokens, much slower).

Every decision of a step (forbidden ids, length limits, no_repeat_ngram, a forced prefix, beam
search's ranks, end rule and length penalty) is `tfformer.decode.rules`', shared with the
compiled searches of `tfformer.decode.keras_search`. Sampling (`sample_search`) follows greedy
search's loop with `tfformer.decode.sampling` choosing the token; its score is the model's
log P(Y), not the tempered one.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import NamedTuple

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.config import DecodingConfig as PAPER  # the paper's decoding defaults
from tfformer.decode import sampling
from tfformer.decode.rules import (
    NEG_INF,
    BeamRules,
    GrowingSequences,
    Prefix,
    TokenRules,
    length_penalty,
    max_output_lengths,
    repeated_ngram_tokens,
)
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

__all__ = ["SearchResult", "beam_search", "greedy_search", "length_penalty",
           "repeated_ngram_tokens", "sample_search"]


class SearchResult(NamedTuple):
    """Search output, best hypothesis first.

    tokens: int32 [batch, n_best, T], generated ids without BOS, EOS-terminated, PAD after.
    scores: float32 [batch, n_best], log P(Y) / lp(Y) (greedy: log P(Y)).
    """

    tokens: tf.Tensor
    scores: tf.Tensor


class _Decoder:
    """next-token log-probabilities for [rows, t] prefixes, with or without the cache."""

    def __init__(self, model, source_ids: tf.Tensor, copies: int, use_cache: bool):
        self.model = model
        self.use_cache = use_cache
        memory, source_mask = model.encode(source_ids, training=False)
        repeat = lambda x: tf.repeat(x, copies, axis=0)  # noqa: E731  row b*copies+i = sentence b
        self.source_mask = repeat(source_mask)
        self.projection = model.embedding.projection()  # once, outside the loop
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
                                              cache=state, training=False,
                                              projection=self.projection)
        else:
            logits = self.model.decode(prefixes, self.memory, self.source_mask, training=False,
                                       projection=self.projection)
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
    prefix = None if prefix_ids is None else Prefix(prefix_ids)
    max_lengths = max_output_lengths(model.transformer_config, source_ids, max_output_extra,
                                     None if prefix is None else prefix.lengths)
    decoder = _Decoder(model, source_ids, 1, use_cache)
    rules = TokenRules(model.transformer_config.vocab_size, no_repeat_ngram)

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


# The searches called eagerly, traced once per model and static arguments: key -> (the model,
# weakly; its tf.function). A few entries only, so that a program that makes many models does
# not keep their graphs.
_TRACED: collections.OrderedDict = collections.OrderedDict()
_TRACED_ENTRIES = 8
_TRACED_LOCK = threading.Lock()


def _as_graph(search, model, tensors: tuple, static: dict) -> SearchResult:
    """`search(model, *tensors, **static)`, as one graph.

    Inside a tf.function (the Translator, the export) the search is built into the caller's
    graph. Called eagerly, its tf.while_loop would run op by op through Keras' eager layer
    calls (seconds for one sentence); instead it runs a tf.function traced once per model and
    static arguments (`reduce_retracing`: a second input shape traces one that takes any),
    whose numbers are the export's. `tf.config.run_functions_eagerly(True)` keeps it eager.
    """
    if not tf.executing_eagerly():
        return search(model, *tensors, **static)
    tensors = tuple(None if t is None else tf.convert_to_tensor(t) for t in tensors)
    key = (search, id(model), tuple(sorted(static.items())),
           tuple(None if t is None else t.dtype for t in tensors))
    try:
        hash(key)
    except TypeError:  # a tensor where a Python number is expected (alpha): no key to trace by
        return search(model, *tensors, **static)
    with _TRACED_LOCK:  # threads may search at once
        entry = _TRACED.get(key)
        if entry is None or entry[0]() is not model:
            model_ref = weakref.ref(model)  # the cache must not keep a model alive
            entry = _TRACED[key] = (model_ref, tf.function(
                lambda *args: search(model_ref(), *args, **static), autograph=False,
                reduce_retracing=True))
            while len(_TRACED) > _TRACED_ENTRIES:
                _TRACED.popitem(last=False)
        _TRACED.move_to_end(key)
    return entry[1](*tensors)


# do_not_convert: the searches are graph ops (one tf.while_loop); a tf.function that calls them
# traces them as they are, without autograph rewriting their Python (or the model's) on the way.
@do_not_convert
def greedy_search(model, source_ids: tf.Tensor, max_output_extra: int = PAPER.max_output_extra,
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
    return _as_graph(_greedy_search, model, (source_ids, prefix_ids), dict(
        max_output_extra=max_output_extra, use_cache=use_cache, no_repeat_ngram=no_repeat_ngram))


def _greedy_search(model, source_ids, prefix_ids, *, max_output_extra, use_cache,
                   no_repeat_ngram) -> SearchResult:
    return _one_token_per_step(
        model, source_ids, max_output_extra, use_cache, no_repeat_ngram, prefix_ids,
        lambda log_probs, t: tf.argmax(log_probs, axis=-1, output_type=tf.int32))


@do_not_convert
def sample_search(model, source_ids: tf.Tensor, temperature: tf.Tensor, top_k: tf.Tensor,
                  top_p: tf.Tensor, seeds: tf.Tensor,
                  max_output_extra: int = PAPER.max_output_extra, use_cache: bool = True, *,
                  no_repeat_ngram: int = 0,
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
    return _as_graph(_sample_search, model,
                     (source_ids, temperature, top_k, top_p, seeds, prefix_ids), dict(
                         max_output_extra=max_output_extra, use_cache=use_cache,
                         no_repeat_ngram=no_repeat_ngram))


def _sample_search(model, source_ids, temperature, top_k, top_p, seeds, prefix_ids, *,
                   max_output_extra, use_cache, no_repeat_ngram) -> SearchResult:
    temperature = tf.cast(temperature, tf.float32)
    top_k = tf.cast(top_k, tf.int32)
    top_p = tf.cast(top_p, tf.float32)
    seeds = tf.cast(seeds, tf.int64)
    return _one_token_per_step(
        model, source_ids, max_output_extra, use_cache, no_repeat_ngram, prefix_ids,
        lambda log_probs, t: sampling.sample(log_probs, temperature, top_k, top_p, seeds, t))


@do_not_convert
def beam_search(model, source_ids: tf.Tensor, beam_size: int = PAPER.beam_size,
                alpha: float = PAPER.length_penalty,
                max_output_extra: int = PAPER.max_output_extra, n_best: int = 1,
                use_cache: bool = True, *, no_repeat_ngram: int = 0,
                prefix_ids: tf.Tensor | None = None,
                length_penalty_form: str = PAPER.length_penalty_form) -> SearchResult:
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
        length_penalty_form: "gnmt" (§6.1) or "power" (|Y| ** alpha; `rules.length_penalty`).

    Returns:
        SearchResult with the n_best finished hypotheses per sentence, best first.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and beam_size ({beam_size}), got {n_best}")
    k = beam_size
    if model.transformer_config.vocab_size < 2 * k:
        raise ValueError(f"beam_size {k} needs a vocabulary of at least {2 * k} ids")
    return _as_graph(_beam_search, model, (source_ids, prefix_ids), dict(
        beam_size=beam_size, alpha=alpha, max_output_extra=max_output_extra, n_best=n_best,
        use_cache=use_cache, no_repeat_ngram=no_repeat_ngram, form=length_penalty_form))


def _beam_search(model, source_ids, prefix_ids, *, beam_size, alpha, max_output_extra, n_best,
                 use_cache, no_repeat_ngram, form) -> SearchResult:
    k = beam_size
    source_ids = tf.cast(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    prefix = None if prefix_ids is None else Prefix(prefix_ids)
    max_lengths = max_output_lengths(model.transformer_config, source_ids, max_output_extra,
                                     None if prefix is None else prefix.lengths)
    beam = BeamRules(k, alpha, max_lengths, None if prefix is None else prefix.lengths,
                     GrowingSequences, form)
    decoder = _Decoder(model, source_ids, k, use_cache)
    rules = TokenRules(model.transformer_config.vocab_size, no_repeat_ngram)
    batch_offsets = (tf.range(batch) * k)[:, tf.newaxis]
    per_row = lambda x: tf.repeat(x, k, axis=0)  # noqa: E731  [batch] -> [batch * k]
    row_max_lengths = per_row(max_lengths)

    def body(t, alive, alive_log_probs, finished, finished_scores, done, state):
        rows = tf.reshape(alive, [batch * k, -1])
        log_probs, state = decoder(rows, state)
        log_probs = rules(log_probs, t + 1 >= row_max_lengths,
                          rows[:, 1:] if no_repeat_ngram else None,
                          None if prefix is None else per_row(prefix.forced(t)))
        log_probs = tf.reshape(log_probs, [batch, k, tf.shape(log_probs)[-1]])
        alive, alive_log_probs, finished, finished_scores, done, beams = beam.step(
            t, alive, alive_log_probs, finished, finished_scores, done, log_probs)
        state = decoder.reorder(state, tf.reshape(beams + batch_offsets, [-1]))
        return t + 1, alive, alive_log_probs, finished, finished_scores, done, state

    loop_vars = (tf.constant(0), tf.fill([batch, k, 1], BOS_ID), beam.initial_log_probs(batch),
                 tf.fill([batch, k, 1], BOS_ID), tf.fill([batch, k], NEG_INF),
                 tf.zeros([batch], tf.bool), decoder.initial_state)
    sequence_shape = tf.TensorShape([None, k, None])
    _, _, _, finished, finished_scores, _, _ = tf.while_loop(
        lambda t, *rest: tf.logical_not(tf.reduce_all(rest[4])),
        body, loop_vars,
        shape_invariants=(tf.TensorShape([]), sequence_shape, tf.TensorShape([None, k]),
                          sequence_shape, tf.TensorShape([None, k]), tf.TensorShape([None]),
                          decoder.state_shape_invariants(decoder.initial_state)))
    return SearchResult(finished[:, :n_best, 1:], finished_scores[:, :n_best])

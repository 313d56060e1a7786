"""Greedy, sampling and beam search (§6.1) as TensorFlow graphs: the searches the SavedModel
saves (stock TF Serving runs them, without XLA) and the Translator runs. Each is the loop of
`tfformer.decode.loop` over its growing layout, in one `tf.while_loop`; called eagerly, a search
runs that graph too, traced once per model and options (`_as_graph`).

The encoder runs once. With `use_cache=True` (the default) the cross-attention keys/values are
projected once and each step feeds only the newest token through the decoder, whose
self-attention cache grows by one position per step and is reordered by beam. With
`use_cache=False` every step recomputes the decoder over the whole prefix (for tests and
benchmarks; same tokens, much slower). Sampling's score is the model's log P(Y), not the
tempered one.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import NamedTuple

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.config import DecodingConfig as PAPER  # the paper's decoding defaults
from tfformer.decode import loop, rules
from tfformer.decode.rules import length_penalty, repeated_ngram_tokens

__all__ = ["SearchResult", "beam_search", "greedy_search", "length_penalty",
           "repeated_ngram_tokens", "sample_search"]


class SearchResult(NamedTuple):
    """Search output, best hypothesis first.

    tokens: int32 [batch, n_best, T], generated ids without BOS, EOS-terminated, PAD after.
    scores: float32 [batch, n_best], log P(Y) / lp(Y) (greedy: log P(Y)).
    """

    tokens: tf.Tensor
    scores: tf.Tensor


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
    except TypeError:  # a tensor where a number is expected (length_penalty): no key to trace by
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
    return _one_token_per_step(model, source_ids, prefix_ids, max_output_extra, use_cache,
                               no_repeat_ngram, loop.greedy_choice)


def _one_token_per_step(model, source_ids, prefix_ids, max_output_extra, use_cache,
                        no_repeat_ngram, choose) -> SearchResult:
    layout = loop.GrowingLayout(use_cache)
    sequences, scores, t = loop.one_token_per_step(
        model, layout, source_ids, prefix_ids, max_output_extra, no_repeat_ngram, choose)
    return SearchResult(layout.tokens(sequences, t)[:, tf.newaxis], scores[:, tf.newaxis])


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
    return _one_token_per_step(model, source_ids, prefix_ids, max_output_extra, use_cache,
                               no_repeat_ngram,
                               loop.sampling_choice(temperature, top_k, top_p, seeds))


@do_not_convert
def beam_search(model, source_ids: tf.Tensor, beam_size: int = PAPER.beam_size,
                length_penalty: float = PAPER.length_penalty,
                max_output_extra: int = PAPER.max_output_extra, n_best: int = 1,
                use_cache: bool = True, *, no_repeat_ngram: int = 0,
                prefix_ids: tf.Tensor | None = None,
                length_penalty_form: str = PAPER.length_penalty_form,
                alpha: float | None = None) -> SearchResult:
    """Beam search with the GNMT length penalty (§6.1: k = 4, alpha = 0.6).

    Args:
        model: a `Transformer`.
        source_ids: int [batch, S], EOS-terminated and PAD-padded.
        beam_size: k.
        length_penalty: its exponent alpha; 0 ranks by log P(Y) alone (`alpha=`, its former
            name, still works, with a DeprecationWarning).
        max_output_extra: maximum output length = source length + this.
        n_best: hypotheses to return per sentence (<= k).
        use_cache: use the incremental key/value cache (else recompute the whole prefix).
        no_repeat_ngram: n > 0 forbids repeating an n-gram (module docstring).
        prefix_ids: int [batch, P], PAD-padded: a forced target prefix per sentence.
        length_penalty_form: "gnmt" (§6.1) or "power" (|Y| ** alpha; `rules.length_penalty`).

    Returns:
        SearchResult with the n_best finished hypotheses per sentence, best first.
    """
    length_penalty = rules.renamed_alpha(length_penalty, alpha)
    loop.check_beam(model, beam_size, n_best)
    return _as_graph(_beam_search, model, (source_ids, prefix_ids), dict(
        beam_size=beam_size, length_penalty=length_penalty, max_output_extra=max_output_extra,
        n_best=n_best, use_cache=use_cache, no_repeat_ngram=no_repeat_ngram,
        form=length_penalty_form))


def _beam_search(model, source_ids, prefix_ids, *, beam_size, length_penalty, max_output_extra,
                 n_best, use_cache, no_repeat_ngram, form) -> SearchResult:
    layout = loop.GrowingLayout(use_cache)
    finished, scores, t = loop.beam(model, layout, source_ids, prefix_ids, beam_size,
                                    length_penalty,
                                    max_output_extra, no_repeat_ngram, form)
    return SearchResult(layout.tokens(finished[:, :n_best], t), scores[:, :n_best])

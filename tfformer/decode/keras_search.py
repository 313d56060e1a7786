"""Greedy, beam and sampling search on any Keras backend, for dev BLEU, `tfformer-evaluate` and
translations where the SavedModel's graph search (`tfformer.decode.search`) cannot run the model
(JAX, with or without TensorFlow installed). NumPy arrays in and out.

Each is the loop of `tfformer.decode.loop` over its fixed-capacity layout: every step has the
same shapes, so under JAX the whole search is one XLA program (`jax.jit`, compiled once per
batch shape) that runs without returning to the host between steps (sampling calls NumPy for
its choice of token: `loop.sampling_choice`). The loops and rules are the graph search's, so the
tokens are identical on the same weights. Text goes through SentencePiece in Python
(`tfformer.data.pieces`), so no TensorFlow is needed.
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

import keras
import numpy as np
from keras import ops

from tfformer.config import DecodingConfig as PAPER  # the paper's decoding defaults
from tfformer.decode import loop, rules
from tfformer.decode.alignments import alignment_indices, pharaoh_text
from tfformer.special_tokens import EOS_ID, PAD_ID


def greedy_search(model, source_ids: np.ndarray, max_output_extra: int = PAPER.max_output_extra, *,
                  no_repeat_ngram: int = 0,
                  prefix_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Greedy decoding of int [batch, S] PAD-padded, EOS-terminated source ids.

    Args:
        no_repeat_ngram, prefix_ids: as for `tfformer.decode.search.greedy_search`.

    Returns:
        (tokens int32 [batch, T] without BOS, EOS-terminated, PAD after; scores float32
        [batch], log P(Y)), as `tfformer.decode.search.greedy_search` gives them.
    """
    rules.TokenRules.check(no_repeat_ngram)
    return _compiled(model, ("greedy", max_output_extra, no_repeat_ngram), _greedy, source_ids,
                     prefix_ids)


def sample_search(model, source_ids: np.ndarray, temperature, top_k, top_p, seeds,
                  max_output_extra: int = PAPER.max_output_extra, *, no_repeat_ngram: int = 0,
                  prefix_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sampling as `tfformer.decode.search.sample_search` does it, on the same random numbers
    (`tfformer.decode.sampling`): per sentence temperature (> 0), top_k (0: off), top_p (in
    (0, 1]; 1: off) and seed (>= 0), arrays of [batch] (or one value for all).

    Returns:
        (tokens, scores) as `greedy_search`; scores are the model's log P(Y) of the sample.
    """
    rules.TokenRules.check(no_repeat_ngram)
    batch = len(source_ids)
    temperature, top_k, top_p, seeds = (
        np.broadcast_to(np.asarray(value, dtype), [batch]) for value, dtype in
        ((temperature, np.float32), (top_k, np.int32), (top_p, np.float32), (seeds, np.int64)))
    if keras.backend.backend() != "tensorflow":
        seeds = loop.seed_words(seeds)
    return _compiled(model, ("sample", max_output_extra, no_repeat_ngram), _sample, source_ids,
                     prefix_ids, (temperature, top_k, top_p, seeds))


def beam_search(model, source_ids: np.ndarray, beam_size: int = PAPER.beam_size,
                length_penalty: float = PAPER.length_penalty,
                max_output_extra: int = PAPER.max_output_extra, n_best: int = 1, *,
                no_repeat_ngram: int = 0, prefix_ids: np.ndarray | None = None,
                length_penalty_form: str = PAPER.length_penalty_form,
                alpha: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Beam search with the length penalty of §6.1, by `tfformer.decode.rules` (token-identical
    to `tfformer.decode.search.beam_search` on the same weights).

    Returns:
        (tokens int32 [batch, n_best, T] without BOS, EOS-terminated, PAD after; scores float32
        [batch, n_best], log P(Y) / lp(Y)), best first.
    """
    length_penalty = rules.renamed_alpha(length_penalty, alpha)
    loop.check_beam(model, beam_size, n_best)
    rules.TokenRules.check(no_repeat_ngram)
    key = ("beam", beam_size, float(length_penalty), max_output_extra, no_repeat_ngram,
           length_penalty_form)
    tokens, scores = _compiled(model, key, _beam, source_ids, prefix_ids)
    return tokens[:, :n_best], scores[:, :n_best]


def _layout(model, source_ids, prefix_ids, max_output_extra: int) -> loop.FixedLayout:
    return loop.FixedLayout(loop.capacity(model, source_ids, max_output_extra, prefix_ids))


def _greedy(model, source_ids, prefix_ids, max_output_extra: int, no_repeat_ngram: int):
    return loop.one_token_per_step(
        model, _layout(model, source_ids, prefix_ids, max_output_extra), source_ids, prefix_ids,
        max_output_extra, no_repeat_ngram, loop.greedy_choice)


def _sample(model, source_ids, prefix_ids, max_output_extra: int, no_repeat_ngram: int,
            temperature, top_k, top_p, seeds):
    return loop.one_token_per_step(
        model, _layout(model, source_ids, prefix_ids, max_output_extra), source_ids, prefix_ids,
        max_output_extra, no_repeat_ngram, loop.sampling_choice(temperature, top_k, top_p, seeds))


def _beam(model, source_ids, prefix_ids, k: int, length_penalty: float, max_output_extra: int,
          no_repeat_ngram: int, form: str):
    return loop.beam(model, _layout(model, source_ids, prefix_ids, max_output_extra), source_ids,
                     prefix_ids, k, length_penalty, max_output_extra, no_repeat_ngram, form)


# model -> {search key: the search compiled for it}; the weights are arguments, not constants,
# so a model trained further is searched with its new weights by the same program.
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compiled(model, key: tuple, search: Callable, source_ids, prefix_ids, per_sentence=()):
    """The tokens (without BOS) and scores of search(model, source_ids, prefix_ids, *key[1:],
    *per_sentence), as NumPy arrays: under JAX one XLA program per key and padded input shapes
    (the model's variables passed in, `keras.StatelessScope`); on other backends run as it is
    (TensorFlow's own search is the graph one). `per_sentence`: arrays of [batch, ...]."""
    source_ids = np.asarray(source_ids, np.int32)
    prefix_ids = None if prefix_ids is None else np.asarray(prefix_ids, np.int32)
    rows = len(source_ids)
    if keras.backend.backend() != "jax":
        convert = lambda x: None if x is None else ops.convert_to_tensor(x)  # noqa: E731
        outputs = search(model, convert(source_ids), convert(prefix_ids), *key[1:],
                         *map(convert, per_sentence))
    else:
        import jax

        source_ids, prefix_ids = _padded_for_compilation(source_ids, prefix_ids)
        # Padded rows repeat the first sentence's values (valid ones); their output is dropped.
        per_sentence = tuple(np.concatenate([x, np.repeat(x[:1], len(source_ids) - rows, 0)])
                             for x in per_sentence)
        functions = _COMPILED.setdefault(model, {})
        if key not in functions:
            # Weakly: a value of _COMPILED that held its key would keep every model alive.
            model_ref = weakref.ref(model)

            def stateless(values, source_ids, prefix_ids, per_sentence):
                model = model_ref()
                mapping = list(zip(model.variables, values))
                with keras.StatelessScope(state_mapping=mapping):
                    return search(model, source_ids, prefix_ids, *key[1:], *per_sentence)

            functions[key] = jax.jit(stateless)
        outputs = functions[key]([v.value for v in model.variables], source_ids, prefix_ids,
                                 per_sentence)
    sequences, scores, steps = (ops.convert_to_numpy(x) for x in outputs)
    return sequences[:rows, ..., 1:int(steps) + 1], scores[:rows]


def _padded_for_compilation(source_ids: np.ndarray, prefix_ids: np.ndarray | None):
    """The batch padded to a power of two rows (sources of one EOS; no prefix) and the sources
    and prefixes to a multiple of 16 and 8 positions (PAD): batches of other sizes and lengths
    share one compiled search, and each row's search is unchanged (rows are searched
    independently; PAD is masked)."""
    rows, length = source_ids.shape
    padded = np.full([1 << max(rows - 1, 0).bit_length(), -(-length // 16) * 16], PAD_ID,
                     np.int32)
    padded[:, 0] = EOS_ID
    padded[:rows, :length] = source_ids
    if prefix_ids is not None:
        prefixes = np.full([len(padded), -(-prefix_ids.shape[1] // 8) * 8], PAD_ID, np.int32)
        prefixes[:rows, :prefix_ids.shape[1]] = prefix_ids
        prefix_ids = prefixes
    return padded, prefix_ids


def _search_texts(model, tokenizer, sentences: Sequence[str], max_output_extra: int,
                  beam_size: int, length_penalty: float, no_repeat_ngram: int,
                  length_penalty_form: str = PAPER.length_penalty_form):
    """(pieces, source ids, best tokens [batch, T], their scores) of `translate_texts`."""
    pieces = getattr(tokenizer, "pieces", tokenizer)
    source_ids = pieces.encode_source(sentences)
    if beam_size == 1:
        tokens, scores = greedy_search(model, source_ids, max_output_extra,
                                       no_repeat_ngram=no_repeat_ngram)
    else:
        tokens, scores = beam_search(model, source_ids, beam_size, length_penalty,
                                     max_output_extra,
                                     no_repeat_ngram=no_repeat_ngram,
                                     length_penalty_form=length_penalty_form)
        tokens, scores = tokens[:, 0], scores[:, 0]
    return pieces, source_ids, tokens, scores


def translate_texts(model, tokenizer, sentences: Sequence[str],
                    max_output_extra: int = PAPER.max_output_extra, beam_size: int = 1,
                    length_penalty: float = PAPER.length_penalty, no_repeat_ngram: int = 0,
                    length_penalty_form: str = PAPER.length_penalty_form
                    ) -> list[tuple[str, float]]:
    """(translation, score) of each sentence, in order: greedy search (score log P(Y)) for
    beam_size 1, else beam search (log P(Y) / lp(Y)).

    `tokenizer`: a `tfformer.data.pieces.SentencePieces`, or a `Tokenizer` (its `pieces`):
    text is encoded and decoded in Python, so this runs where TensorFlow is not installed.
    """
    if not sentences:
        return []
    pieces, _, tokens, scores = _search_texts(model, tokenizer, sentences, max_output_extra,
                                              beam_size, length_penalty, no_repeat_ngram,
                                              length_penalty_form)
    return list(zip(pieces.decode(tokens), (float(score) for score in scores)))


def translate_texts_aligned(model, tokenizer, sentences: Sequence[str],
                            max_output_extra: int = PAPER.max_output_extra, beam_size: int = 1,
                            length_penalty: float = PAPER.length_penalty, no_repeat_ngram: int = 0,
                            length_penalty_form: str = PAPER.length_penalty_form
                            ) -> list[tuple[str, float, str]]:
    """`translate_texts` with each translation's alignment, as the export's `translate_align`
    gives it (`tfformer.decode.alignments`): (translation, score, "i-j ...")."""
    if not sentences:
        return []
    pieces, source_ids, tokens, scores = _search_texts(
        model, tokenizer, sentences, max_output_extra, beam_size, length_penalty, no_repeat_ngram,
        length_penalty_form)
    indices = ops.convert_to_numpy(alignment_indices(model, source_ids, tokens))
    return list(zip(pieces.decode(tokens), (float(score) for score in scores),
                    (pharaoh_text(row) for row in indices)))

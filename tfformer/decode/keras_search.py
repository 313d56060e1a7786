"""Greedy, beam and sampling search in `keras.ops`, on any Keras backend: dev BLEU,
`tfformer-evaluate` and translations where the SavedModel's search (`tfformer.decode.search`, a
TensorFlow graph) cannot run the model (JAX, with or without TensorFlow installed).

Greedy and beam search are one `ops.while_loop` over the decoder's fixed-capacity cache and
hypotheses of fixed capacity (`rules.FixedSequences`): every step has the same shapes, so under
JAX the whole search is one XLA program (`jax.jit`, compiled once per batch shape) that runs
without returning to the host between steps. Every decision of a step is
`tfformer.decode.rules`', as in the graph search, so the tokens are identical on the same
weights. Sampling steps in Python with NumPy choosing the token: its random numbers are unsigned
64-bit integers (`tfformer.decode.sampling`), which JAX computes only in x64 mode. Text goes
through SentencePiece in Python (`tfformer.data.pieces`), so no TensorFlow is needed.
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

import keras
import numpy as np
from keras import ops, tree

from tfformer.config import DecodingConfig as PAPER  # the paper's decoding defaults
from tfformer.decode import rules
from tfformer.decode.alignments import alignment_indices, pharaoh_text
from tfformer.decode.sampling import sample_np
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


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
    tokens, scores, steps = _compiled(model, ("greedy", max_output_extra, no_repeat_ngram),
                                      _greedy_loop, source_ids, prefix_ids)
    return tokens[:, 1:steps + 1], scores


def beam_search(model, source_ids: np.ndarray, beam_size: int = PAPER.beam_size,
                alpha: float = PAPER.length_penalty,
                max_output_extra: int = PAPER.max_output_extra, n_best: int = 1, *,
                no_repeat_ngram: int = 0, prefix_ids: np.ndarray | None = None,
                length_penalty_form: str = PAPER.length_penalty_form
                ) -> tuple[np.ndarray, np.ndarray]:
    """Beam search with the length penalty of §6.1, by `tfformer.decode.rules` (token-identical
    to `tfformer.decode.search.beam_search` on the same weights).

    Returns:
        (tokens int32 [batch, n_best, T] without BOS, EOS-terminated, PAD after; scores float32
        [batch, n_best], log P(Y) / lp(Y)), best first.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and beam_size ({beam_size}), got {n_best}")
    if model.transformer_config.vocab_size < 2 * beam_size:
        raise ValueError(f"beam_size {beam_size} needs a vocabulary of at least "
                         f"{2 * beam_size} ids")
    rules.TokenRules.check(no_repeat_ngram)
    key = ("beam", beam_size, float(alpha), max_output_extra, no_repeat_ngram,
           length_penalty_form)
    tokens, scores, steps = _compiled(model, key, _beam_loop, source_ids, prefix_ids)
    return tokens[:, :n_best, 1:steps + 1], scores[:, :n_best]


def _capacity(model, source_ids, max_output_extra: int, prefix_ids) -> int:
    """The most steps any sentence of this shape may take: the hypotheses' fixed capacity."""
    config = model.transformer_config
    capacity = source_ids.shape[1] + max_output_extra + (
        0 if prefix_ids is None else prefix_ids.shape[1])
    if config.positional == "learned":
        capacity = min(capacity, config.max_length)
    return max(capacity, 1)


def _start(shape, capacity: int):
    """int32 [*shape, capacity + 1]: BOS, then PAD until written."""
    return ops.concatenate([ops.full([*shape, 1], BOS_ID, "int32"),
                            ops.full([*shape, capacity], PAD_ID, "int32")], axis=-1)


def _prepare(model, source_ids, prefix_ids, max_output_extra: int, no_repeat_ngram: int):
    """What both loops start from: the capacity, the prefix (or None), each sentence's maximum
    length, the token rules, and the encoder's memory and source mask."""
    config = model.transformer_config
    prefix = None if prefix_ids is None else rules.Prefix(prefix_ids)
    max_lengths = rules.max_output_lengths(config, source_ids, max_output_extra,
                                           None if prefix is None else prefix.lengths)
    memory, source_mask = model.encode(source_ids, training=False)
    return (_capacity(model, source_ids, max_output_extra, prefix_ids), prefix, max_lengths,
            rules.TokenRules(config.vocab_size, no_repeat_ngram), memory, source_mask)


def _next_log_probs(model, rows, t, source_mask, cache, token_rules, at_limit, forced):
    """The next token's log-probabilities [rows, vocab] after the hypotheses `rows` (int
    [rows, capacity + 1], t + 1 written), under the token rules, and the cache written at t."""
    logits, cache = model.decode(ops.expand_dims(ops.take(rows, t, axis=1), 1), None,
                                 source_mask, cache=cache, cache_index=t, training=False)
    log_probs = token_rules(ops.log_softmax(logits[:, -1, :], axis=-1), at_limit,
                            rows[:, 1:] if token_rules.no_repeat_ngram else None, forced,
                            length=t)
    return log_probs, cache


def _greedy_loop(model, source_ids, prefix_ids, max_output_extra: int, no_repeat_ngram: int):
    batch = source_ids.shape[0]
    capacity, prefix, max_lengths, token_rules, memory, source_mask = _prepare(
        model, source_ids, prefix_ids, max_output_extra, no_repeat_ngram)
    cache = model.init_cache(memory, capacity=capacity)

    def body(t, tokens, scores, finished, cache):
        log_probs, cache = _next_log_probs(
            model, tokens, t, source_mask, cache, token_rules, t + 1 >= max_lengths,
            None if prefix is None else prefix.forced(t))
        chosen = ops.cast(ops.argmax(log_probs, axis=-1), "int32")
        chosen_log_probs = ops.take_along_axis(log_probs, ops.expand_dims(chosen, 1), axis=1)
        scores = scores + ops.where(finished, 0.0, chosen_log_probs[:, 0])
        chosen = ops.where(finished, PAD_ID, chosen)
        finished = ops.logical_or(finished, ops.equal(chosen, EOS_ID))
        return t + 1, rules.FixedSequences.append(tokens, chosen, t), scores, finished, cache

    t, tokens, scores, _, _ = ops.while_loop(
        lambda t, tokens, scores, finished, cache: ops.logical_not(ops.all(finished)), body,
        (ops.convert_to_tensor(0, "int32"), _start([batch], capacity),
         ops.zeros([batch], "float32"), ops.zeros([batch], "bool"), cache),
        maximum_iterations=capacity)
    return tokens, scores, t


def _beam_loop(model, source_ids, prefix_ids, k: int, alpha: float, max_output_extra: int,
               no_repeat_ngram: int, form: str):
    batch, vocab = source_ids.shape[0], model.transformer_config.vocab_size
    capacity, prefix, max_lengths, token_rules, memory, source_mask = _prepare(
        model, source_ids, prefix_ids, max_output_extra, no_repeat_ngram)
    beam = rules.BeamRules(k, alpha, max_lengths, None if prefix is None else prefix.lengths,
                           rules.FixedSequences, form)
    per_row = lambda x: ops.repeat(x, k, axis=0)  # noqa: E731  row b*k+i = sentence b, beam i
    source_mask = per_row(source_mask)
    cache = tree.map_structure(per_row, model.init_cache(memory, capacity=capacity))
    row_max_lengths = per_row(max_lengths)
    offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * k, 1)

    def body(t, alive, alive_log_probs, finished, finished_scores, done, cache):
        log_probs, cache = _next_log_probs(
            model, ops.reshape(alive, [batch * k, capacity + 1]), t, source_mask, cache,
            token_rules, t + 1 >= row_max_lengths,
            None if prefix is None else per_row(prefix.forced(t)))
        alive, alive_log_probs, finished, finished_scores, done, beams = beam.step(
            t, alive, alive_log_probs, finished, finished_scores, done,
            ops.reshape(log_probs, [batch, k, vocab]))
        cache = model.reorder_cache(cache, ops.reshape(beams + offsets, [-1]))
        return t + 1, alive, alive_log_probs, finished, finished_scores, done, cache

    start = _start([batch, k], capacity)
    t, _, _, finished, finished_scores, _, _ = ops.while_loop(
        lambda t, *rest: ops.logical_not(ops.all(rest[4])), body,
        (ops.convert_to_tensor(0, "int32"), start, beam.initial_log_probs(batch), start,
         ops.full([batch, k], rules.NEG_INF, "float32"), ops.zeros([batch], "bool"), cache),
        maximum_iterations=capacity)
    return finished, finished_scores, t


# model -> {search key: the search compiled for it}; the weights are arguments, not constants,
# so a model trained further is searched with its new weights by the same program.
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compiled(model, key: tuple, loop: Callable, source_ids, prefix_ids):
    """loop(model, source_ids, prefix_ids, *key[1:]) as NumPy arrays: under JAX one XLA program
    per key and padded input shapes (the model's variables passed in, `keras.StatelessScope`);
    on other backends run as it is (TensorFlow's own search is the graph one)."""
    source_ids = np.asarray(source_ids, np.int32)
    prefix_ids = None if prefix_ids is None else np.asarray(prefix_ids, np.int32)
    rows = len(source_ids)
    if keras.backend.backend() != "jax":
        outputs = loop(model, ops.convert_to_tensor(source_ids),
                       None if prefix_ids is None else ops.convert_to_tensor(prefix_ids),
                       *key[1:])
    else:
        import jax

        source_ids, prefix_ids = _padded_for_compilation(source_ids, prefix_ids)
        functions = _COMPILED.setdefault(model, {})
        if key not in functions:
            # Weakly: a value of _COMPILED that held its key would keep every model alive.
            model_ref = weakref.ref(model)

            def stateless(values, source_ids, prefix_ids):
                model = model_ref()
                mapping = list(zip(model.variables, values))
                with keras.StatelessScope(state_mapping=mapping):
                    return loop(model, source_ids, prefix_ids, *key[1:])

            functions[key] = jax.jit(stateless)
        outputs = functions[key]([v.value for v in model.variables], source_ids, prefix_ids)
    tokens, scores, steps = (ops.convert_to_numpy(x) for x in outputs)
    return tokens[:rows], scores[:rows], int(steps)


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


def sample_search(model, source_ids: np.ndarray, temperature, top_k, top_p, seeds,
                  max_output_extra: int = PAPER.max_output_extra) -> tuple[np.ndarray, np.ndarray]:
    """Sampling as `tfformer.decode.search.sample_search` does it, on the same random numbers
    (`tfformer.decode.sampling`): per sentence temperature (> 0), top_k (0: off), top_p (in
    (0, 1]; 1: off) and seed (>= 0), arrays of [batch]. One Python step per token.

    Returns:
        (tokens, scores) as `greedy_search`; scores are the model's log P(Y) of the sample.
    """
    source_ids = np.asarray(source_ids, np.int32)
    batch = source_ids.shape[0]
    parameters = [np.broadcast_to(np.asarray(value, dtype), [batch]) for value, dtype in
                  ((temperature, np.float32), (top_k, np.int32), (top_p, np.float32),
                   (seeds, np.int64))]
    config = model.transformer_config
    max_lengths = ops.convert_to_numpy(
        rules.max_output_lengths(config, source_ids, max_output_extra))
    token_rules = rules.TokenRules(config.vocab_size)
    memory, source_mask = model.encode(source_ids, training=False)
    cache = model.init_cache(memory, capacity=int(max_lengths.max()))
    tokens = np.full([batch, 1], BOS_ID, np.int32)
    scores = np.zeros([batch], np.float32)
    finished = np.zeros([batch], bool)
    for t in range(int(max_lengths.max())):
        logits, cache = model.decode(tokens[:, -1:], None, source_mask, cache=cache,
                                     cache_index=t, training=False)
        log_probs = ops.convert_to_numpy(token_rules(
            ops.log_softmax(logits[:, -1, :], axis=-1), ops.convert_to_tensor(
                t + 1 >= max_lengths)))
        chosen = sample_np(log_probs, *parameters, t)
        scores += np.where(finished, 0.0, log_probs[np.arange(batch), chosen])
        chosen = np.where(finished, PAD_ID, chosen)
        finished |= chosen == EOS_ID
        tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
        if finished.all():
            break
    return tokens[:, 1:], scores


def _search_texts(model, tokenizer, sentences: Sequence[str], max_output_extra: int,
                  beam_size: int, alpha: float, no_repeat_ngram: int,
                  length_penalty_form: str = PAPER.length_penalty_form):
    """(pieces, source ids, best tokens [batch, T], their scores) of `translate_texts`."""
    pieces = getattr(tokenizer, "pieces", tokenizer)
    source_ids = pieces.encode_source(sentences)
    if beam_size == 1:
        tokens, scores = greedy_search(model, source_ids, max_output_extra,
                                       no_repeat_ngram=no_repeat_ngram)
    else:
        tokens, scores = beam_search(model, source_ids, beam_size, alpha, max_output_extra,
                                     no_repeat_ngram=no_repeat_ngram,
                                     length_penalty_form=length_penalty_form)
        tokens, scores = tokens[:, 0], scores[:, 0]
    return pieces, source_ids, tokens, scores


def translate_texts(model, tokenizer, sentences: Sequence[str],
                    max_output_extra: int = PAPER.max_output_extra, beam_size: int = 1,
                    alpha: float = PAPER.length_penalty, no_repeat_ngram: int = 0,
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
                                              beam_size, alpha, no_repeat_ngram,
                                              length_penalty_form)
    return list(zip(pieces.decode(tokens), (float(score) for score in scores)))


def translate_texts_aligned(model, tokenizer, sentences: Sequence[str],
                            max_output_extra: int = PAPER.max_output_extra, beam_size: int = 1,
                            alpha: float = PAPER.length_penalty, no_repeat_ngram: int = 0,
                            length_penalty_form: str = PAPER.length_penalty_form
                            ) -> list[tuple[str, float, str]]:
    """`translate_texts` with each translation's alignment, as the export's `translate_align`
    gives it (`tfformer.decode.alignments`): (translation, score, "i-j ...")."""
    if not sentences:
        return []
    pieces, source_ids, tokens, scores = _search_texts(
        model, tokenizer, sentences, max_output_extra, beam_size, alpha, no_repeat_ngram,
        length_penalty_form)
    indices = ops.convert_to_numpy(alignment_indices(model, source_ids, tokens))
    return list(zip(pieces.decode(tokens), (float(score) for score in scores),
                    (pharaoh_text(row) for row in indices)))

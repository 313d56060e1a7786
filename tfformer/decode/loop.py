"""The search loops, one per strategy, written once in `keras.ops`: `one_token_per_step` (greedy
search and sampling, which differ only in how they choose a token) and `beam` (§6.1). Every
decision of a step is `tfformer.decode.rules`'.

A loop runs over one of two layouts of the hypotheses and the decoder's cache:
- `GrowingLayout`: one column more per step and a cache grown by concatenation, in a
  `tf.while_loop` with relaxed shapes. The SavedModel's searches (`tfformer.decode.search`):
  stock TF Serving runs them without XLA, and growing shapes is what is fastest there
  (docs/results.md, "One search loop").
- `FixedLayout`: a fixed capacity written in place (`cache_index`), in `ops.while_loop`: every
  step has the same shapes, so XLA (JAX, or TensorFlow's `jit_compile`) compiles the whole
  search once (`tfformer.decode.keras_search`, any backend).
"""

from __future__ import annotations

from typing import Callable

import keras
import numpy as np
from keras import ops, tree

from tfformer.decode import rules
from tfformer.decode.sampling import sample_np
from tfformer.model.layers import kernels
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


class GrowingLayout:
    """Hypotheses [..., t + 1] and a cache that grow each step (TensorFlow graph only).

    use_cache: False recomputes the decoder over the whole prefix at every step (tests and
    benchmarks; same tokens, much slower).
    """

    sequences = rules.GrowingSequences

    def __init__(self, use_cache: bool = True):
        self.use_cache = use_cache
        self.memory = None

    def start(self, shape):
        """int32 [*shape, 1]: BOS."""
        return ops.full([*shape, 1], BOS_ID, "int32")

    def initial_cache(self, model, memory, per_row):
        if not self.use_cache:
            self.memory = per_row(memory)
            return []
        return tree.map_structure(per_row, model.init_cache(memory))

    def logits(self, model, rows, t, source_mask, cache, projection):
        if not self.use_cache:
            return model.decode(rows, self.memory, source_mask, training=False,
                                projection=projection), cache
        # rows[:, -1] and a new axis, not rows[:, -1:]: one position, statically, which the
        # attention's fast forms need.
        return model.decode(ops.expand_dims(rows[:, -1], 1), None, source_mask, cache=cache,
                            training=False, projection=projection)

    def generated(self, rows, t):
        """The hypotheses' generated tokens and how many of their columns are written."""
        return rows[:, 1:], None

    def reorder(self, model, cache, rows):
        return model.reorder_cache(cache, rows) if self.use_cache else cache

    def while_loop(self, cond, body, loop_vars, sequences: tuple[int, ...]):
        """`tf.while_loop` over loop_vars (the step first, the cache last), of which those at
        `sequences` grow along their last axis; the batch may be any size."""
        import tensorflow as tf

        def invariant(x, grows=False):
            dims = [None if i == 0 else d for i, d in enumerate(x.shape)] if x.shape else []
            return tf.TensorShape(dims[:-1] + [None] if grows else dims)

        invariants = [invariant(x, i in sequences) for i, x in enumerate(loop_vars[:-1])]
        invariants.append(tree.map_structure(
            lambda x: tf.TensorShape([None] * len(x.shape)), loop_vars[-1]))
        return tf.while_loop(cond, body, loop_vars, shape_invariants=tuple(invariants))

    def tokens(self, sequences, t):
        """The generated tokens of the loop's hypotheses (without BOS)."""
        return sequences[..., 1:]


class FixedLayout:
    """Hypotheses and cache of a fixed `capacity` (the most steps a sentence may take), written
    in place: the same shapes every step, on any backend."""

    sequences = rules.FixedSequences

    def __init__(self, capacity: int):
        self.capacity = capacity

    def start(self, shape):
        """int32 [*shape, capacity + 1]: BOS, then PAD until written."""
        return ops.concatenate([ops.full([*shape, 1], BOS_ID, "int32"),
                                ops.full([*shape, self.capacity], PAD_ID, "int32")], axis=-1)

    def initial_cache(self, model, memory, per_row):
        return tree.map_structure(per_row, model.init_cache(memory, capacity=self.capacity))

    def logits(self, model, rows, t, source_mask, cache, projection):
        return model.decode(ops.expand_dims(ops.take(rows, t, axis=1), 1), None, source_mask,
                            cache=cache, cache_index=t, training=False, projection=projection)

    def generated(self, rows, t):
        return rows[:, 1:], t

    def reorder(self, model, cache, rows):
        return model.reorder_cache(cache, rows)

    def while_loop(self, cond, body, loop_vars, sequences: tuple[int, ...]):
        return ops.while_loop(cond, body, loop_vars, maximum_iterations=self.capacity)


def capacity(model, source_ids, max_output_extra: int, prefix_ids=None) -> int:
    """The most steps any sentence of these (static) shapes may take: a `FixedLayout`'s."""
    config = model.transformer_config
    steps = source_ids.shape[1] + max_output_extra + (
        0 if prefix_ids is None else prefix_ids.shape[1])
    if config.positional == "learned":
        steps = min(steps, config.max_length)
    return max(steps, 1)


def check_beam(model, beam_size: int, n_best: int) -> None:
    """Raises ValueError unless 1 <= n_best <= beam_size <= half the vocabulary (a step ranks
    2 * beam_size candidates)."""
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and beam_size ({beam_size}), got {n_best}")
    if model.transformer_config.vocab_size < 2 * beam_size:
        raise ValueError(f"beam_size {beam_size} needs a vocabulary of at least "
                         f"{2 * beam_size} ids")


class _Search:
    """What every loop starts from: the encoder's memory once, each sentence's maximum length,
    the token rules and the forced prefix, and the next-token log-probabilities of a step."""

    def __init__(self, model, layout, source_ids, prefix_ids, max_output_extra: int,
                 no_repeat_ngram: int, copies: int):
        config = model.transformer_config
        self.model, self.layout, self.copies = model, layout, copies
        self.source_ids = ops.cast(source_ids, "int32")
        self.batch = ops.shape(self.source_ids)[0]
        self.prefix = None if prefix_ids is None else rules.Prefix(prefix_ids)
        self.max_lengths = rules.max_output_lengths(
            config, self.source_ids, max_output_extra,
            None if self.prefix is None else self.prefix.lengths)
        self.row_max_lengths = self.per_row(self.max_lengths)
        self.token_rules = rules.TokenRules(config.vocab_size, no_repeat_ngram)
        memory, source_mask = model.encode(self.source_ids, training=False)
        self.source_mask = self.per_row(source_mask)
        self.cache = layout.initial_cache(model, memory, self.per_row)
        self.projection = model.embedding.projection()  # once, outside the loop

    def per_row(self, x):
        """[batch, ...] -> [batch * copies, ...]: row b * copies + i is sentence b."""
        return x if self.copies == 1 else ops.repeat(x, self.copies, axis=0)

    def log_probs(self, rows, t, cache):
        """The next token's log-probabilities [rows, vocab] after the hypotheses `rows` (t + 1
        tokens written), under the token rules, and the cache with step t."""
        logits, cache = self.layout.logits(self.model, rows, t, self.source_mask, cache,
                                           self.projection)
        generated, length = self.layout.generated(rows, t)
        log_probs = self.token_rules(
            ops.log_softmax(logits[:, -1, :], axis=-1), t + 1 >= self.row_max_lengths,
            generated if self.token_rules.no_repeat_ngram else None,
            None if self.prefix is None else self.per_row(self.prefix.forced(t)), length=length)
        return log_probs, cache


def one_token_per_step(model, layout, source_ids, prefix_ids, max_output_extra: int,
                       no_repeat_ngram: int, choose: Callable):
    """Greedy search's loop, `choose(log_probs, t)` picking each step's token (int32 [batch]).

    Returns:
        (sequences int32 [batch, L] with BOS, scores float32 [batch] (log P(Y) of what the
        loop generated), steps int32).
    """
    search = _Search(model, layout, source_ids, prefix_ids, max_output_extra, no_repeat_ngram, 1)

    def body(t, sequences, scores, finished, cache):
        log_probs, cache = search.log_probs(sequences, t, cache)
        tokens = ops.cast(choose(log_probs, t), "int32")
        scores = scores + ops.where(finished, 0.0, kernels.take_last_axis(log_probs, tokens))
        tokens = ops.where(finished, PAD_ID, tokens)
        finished = ops.logical_or(finished, ops.equal(tokens, EOS_ID))
        return t + 1, layout.sequences.append(sequences, tokens, t), scores, finished, cache

    t, sequences, scores, _, _ = layout.while_loop(
        lambda t, sequences, scores, finished, cache: ops.logical_not(ops.all(finished)), body,
        (ops.convert_to_tensor(0, "int32"), layout.start([search.batch]),
         ops.zeros([search.batch], "float32"), ops.zeros([search.batch], "bool"), search.cache),
        sequences=(1,))
    return sequences, scores, t


def greedy_choice(log_probs, t):
    return kernels.argmax_last(log_probs)


def seed_words(seeds) -> np.ndarray:
    """int32 [batch, 2]: the bits of int64 seeds [batch], as `sampling_choice` takes them off
    TensorFlow (JAX holds no 64-bit integers outside its x64 mode)."""
    return np.ascontiguousarray(np.asarray(seeds, np.int64)).view(np.int32).reshape(-1, 2)


def _seeds(words) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(words, np.int32)).view(np.int64)[:, 0]


def sampling_choice(temperature, top_k, top_p, seeds) -> Callable:
    """`choose` of a sampling search (`tfformer.decode.sampling`), with per-sentence values
    [batch]: the TensorFlow graph's ops under TensorFlow (seeds int64); elsewhere the NumPy
    form on the same random numbers (seeds as `seed_words`), called from the compiled loop
    under JAX."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        from tfformer.decode import sampling

        return lambda log_probs, t: sampling.sample(log_probs, temperature, top_k, top_p, seeds,
                                                    t)
    if backend == "jax":
        import jax

        def choose(log_probs, t):
            return jax.pure_callback(
                lambda lp, temperature, top_k, top_p, words, t: sample_np(
                    np.asarray(lp), np.asarray(temperature), np.asarray(top_k),
                    np.asarray(top_p), _seeds(words), int(t)),
                jax.ShapeDtypeStruct(log_probs.shape[:1], np.int32),
                log_probs, temperature, top_k, top_p, seeds, t)
        return choose

    def choose(log_probs, t):
        values = [ops.convert_to_numpy(x) for x in (log_probs, temperature, top_k, top_p)]
        return ops.convert_to_tensor(sample_np(*values, _seeds(ops.convert_to_numpy(seeds)),
                                               int(ops.convert_to_numpy(t))))
    return choose


def beam(model, layout, source_ids, prefix_ids, k: int, length_penalty: float,
         max_output_extra: int, no_repeat_ngram: int, form: str):
    """Beam search's loop (`rules.BeamRules`).

    Returns:
        (finished int32 [batch, k, L] with BOS, best first; their scores float32 [batch, k],
        log P(Y) / lp(Y); steps int32).
    """
    search = _Search(model, layout, source_ids, prefix_ids, max_output_extra, no_repeat_ngram, k)
    batch, vocab = search.batch, model.transformer_config.vocab_size
    beam_rules = rules.BeamRules(k, length_penalty, search.max_lengths,
                                 None if search.prefix is None else search.prefix.lengths,
                                 layout.sequences, form)
    offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * k, 1)

    def body(t, alive, alive_log_probs, finished, finished_scores, done, cache):
        log_probs, cache = search.log_probs(
            ops.reshape(alive, [batch * k, -1]), t, cache)
        alive, alive_log_probs, finished, finished_scores, done, beams = beam_rules.step(
            t, alive, alive_log_probs, finished, finished_scores, done,
            ops.reshape(log_probs, [batch, k, vocab]))
        cache = layout.reorder(model, cache, ops.reshape(beams + offsets, [-1]))
        return t + 1, alive, alive_log_probs, finished, finished_scores, done, cache

    start = layout.start([batch, k])
    t, _, _, finished, finished_scores, _, _ = layout.while_loop(
        lambda t, *rest: ops.logical_not(ops.all(rest[4])), body,
        (ops.convert_to_tensor(0, "int32"), start, beam_rules.initial_log_probs(batch), start,
         ops.full([batch, k], rules.NEG_INF, "float32"), ops.zeros([batch], "bool"),
         search.cache), sequences=(1, 3))
    return finished, finished_scores, t

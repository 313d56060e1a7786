"""The search rules, written once in `keras.ops`: the TensorFlow graph's searches
(`tfformer.decode.search`, what the SavedModel runs) and the compiled searches of any backend
(`tfformer.decode.keras_search`) take every decision of a step here.

- A hypothesis starts with BOS; |Y| counts the generated tokens, EOS included; PAD and BOS are
  never generated.
- The maximum output length of sentence b is (its source tokens) + max_output_extra (+ its
  forced prefix), within the model's positions: at that step every token but EOS is forbidden,
  so each hypothesis ends with EOS.
- Beam search (as fairseq): the 2k best continuations are ranked by log-probability; the k best
  of them that do not end in EOS stay alive; those among the top k that end in EOS are finished
  with score log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6) ** alpha (§6.1, from Wu et al. 2016; or
  |Y| ** alpha, Hugging Face's form, with `length_penalty_form` "power"), and the k best
  finished hypotheses are kept.
- A sentence is done when it has k finished hypotheses and no alive one can beat the worst of
  them (log-probabilities only fall, so an alive score is at most logP / lp(max length)), or at
  its maximum length; a search ends once every sentence is done.
- no_repeat_ngram = n > 0 forbids a token that would repeat an n-gram of the hypothesis'
  generated tokens (a forced prefix's included), as CTranslate2's `no_repeat_ngram_size` does:
  the forbidden ids are removed before the softmax, so the allowed ones are renormalized.
- A forced target prefix (ids [batch, P], PAD-padded): at step t < P_b sentence b takes its
  prefix's t-th id at log-probability 0, so its score is that of the continuation (|Y| counts
  the continuation); its maximum length grows by P_b. As CTranslate2's `target_prefix` does,
  beam search then finishes no hypothesis but the best at the first free step (an EOS ranked
  below it becomes a dead beam, which keeps its rank), so a short ending cannot crowd out the
  beam.

Hypotheses are held in one of two layouts (`GrowingSequences`: one column more per step, the
SavedModel's, which stock TF Serving runs; `FixedSequences`: a fixed capacity written in place,
what XLA compiles once); the rules are the same on both.
"""

from __future__ import annotations

import warnings

from keras import ops

from tfformer.config import DecodingConfig as PAPER  # the paper's decoding defaults
from tfformer.model.layers import kernels
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

NEG_INF = -1e9  # finite, so that -inf - -inf never makes a NaN score


def length_penalty(length, alpha: float, form: str = PAPER.length_penalty_form):
    """lp(Y), float32: ((5 + |Y|) / 6) ** alpha (form "gnmt", §6.1), or |Y| ** alpha ("power",
    Hugging Face's generate and fairseq's), |Y| = `length`."""
    length = ops.cast(length, "float32")
    if form == "power":
        return ops.power(length, alpha)
    return ops.power((5.0 + length) / 6.0, alpha)


def renamed_alpha(length_penalty, alpha, stacklevel: int = 3):
    """`length_penalty`, or the value given by its former name `alpha` (DeprecationWarning):
    the searches' knob has one name, as in `DecodingConfig`, the CLIs and the Translator."""
    if alpha is None:
        return length_penalty
    warnings.warn("alpha= is deprecated: the same knob is length_penalty=", DeprecationWarning,
                  stacklevel=stacklevel)
    return alpha


def max_output_lengths(transformer_config, source_ids, max_output_extra: int,
                       prefix_lengths=None):
    """int32 [batch]: the maximum |Y| of each sentence: its source tokens + max_output_extra
    (+ its forced prefix's length), within the model's learned positions."""
    lengths = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)
    lengths = lengths + max_output_extra
    if prefix_lengths is not None:
        lengths = lengths + prefix_lengths
    if transformer_config.positional == "learned":
        # The decoder input is BOS + |Y| - 1 tokens: it must fit the learned positions.
        lengths = ops.minimum(lengths, transformer_config.max_length)
    return ops.maximum(lengths, 1)


def repeated_ngram_tokens(generated, n: int, vocab_size: int, length=None):
    """bool [rows, vocab]: the ids that would complete an n-gram already in `generated` int
    [rows, L] (the hypothesis without BOS): every token that followed an occurrence of the last
    n - 1 tokens (for n = 1, every token so far).

    `length`: how many of the L columns are generated so far (a fixed-capacity buffer);
    None: all of them.
    """
    width = ops.shape(generated)[1]
    length = width if length is None else length
    # -1 before the first token: a window that reaches before it matches nothing.
    padded = ops.pad(generated, [[0, 0], [n - 1, 0]], constant_values=-1)
    columns = ops.arange(width)
    match = ops.broadcast_to(ops.expand_dims(columns < length, 0), ops.shape(generated))
    for j in range(n - 1):  # window i holds padded[i : i + n - 1] and is followed by generated[i]
        last = ops.take(padded, length + j, axis=1)  # the hypothesis' (n - 1)-gram, j-th token
        match = ops.logical_and(match, ops.equal(padded[:, j:j + width],
                                                 ops.expand_dims(last, 1)))
    rows = ops.shape(generated)[0]
    row_ids = ops.broadcast_to(ops.expand_dims(ops.arange(rows), 1), ops.shape(generated))
    indices = ops.stack([ops.reshape(row_ids, [-1]),
                         ops.reshape(ops.cast(generated, row_ids.dtype), [-1])], axis=1)
    hits = ops.scatter(indices, ops.reshape(ops.cast(match, "int32"), [-1]), [rows, vocab_size])
    return hits > 0


class TokenRules:
    """Which ids a step may take: PAD and BOS never; at a hypothesis' length limit, only EOS;
    with no_repeat_ngram, no repeated n-gram; a forced prefix token is taken."""

    def __init__(self, vocab_size: int, no_repeat_ngram: int = 0):
        self.check(no_repeat_ngram)
        self.vocab_size = vocab_size
        self.no_repeat_ngram = no_repeat_ngram
        # The vocabulary masks are made once, outside the decoding loop: row 0 forbids what is
        # never taken, row 1 (at the length limit) all but EOS. A step gathers a row per
        # hypothesis, one pass over [rows, vocab] where combining the masks there takes two.
        self.ids = ops.arange(vocab_size)
        never = ops.logical_or(ops.equal(self.ids, PAD_ID), ops.equal(self.ids, BOS_ID))
        self.forbidden = ops.stack([never, ops.not_equal(self.ids, EOS_ID)])

    @staticmethod
    def check(no_repeat_ngram) -> None:
        """Raises ValueError unless no_repeat_ngram is an integer >= 0."""
        if isinstance(no_repeat_ngram, bool) or not isinstance(no_repeat_ngram, int) \
                or no_repeat_ngram < 0:
            raise ValueError(f"no_repeat_ngram must be an integer >= 0, got {no_repeat_ngram!r}")

    def __call__(self, log_probs, at_limit, generated=None, forced=None, length=None):
        """log_probs [rows, vocab]; at_limit bool [rows]; generated int [rows, L], the tokens so
        far (no_repeat_ngram), of which `length` are written (None: all); forced int [rows],
        the id to take, -1 for none."""
        neg_inf = ops.cast(NEG_INF, log_probs.dtype)
        if self.no_repeat_ngram:
            banned = repeated_ngram_tokens(generated, self.no_repeat_ngram, self.vocab_size,
                                           length)
            log_probs = ops.log_softmax(ops.where(banned, neg_inf, log_probs), axis=-1)
        forbidden = kernels.gather_rows(self.forbidden, ops.cast(at_limit, "int32"))
        log_probs = ops.where(forbidden, neg_inf, log_probs)
        if forced is not None:
            taken = ops.where(ops.equal(self.ids, ops.expand_dims(forced, 1)),
                              ops.cast(0.0, log_probs.dtype), neg_inf)
            log_probs = ops.where(ops.expand_dims(forced >= 0, 1), taken, log_probs)
        return log_probs


class Prefix:
    """A forced target prefix: ids int [batch, P] (PAD-padded, no BOS or EOS)."""

    def __init__(self, prefix_ids):
        prefix_ids = ops.cast(prefix_ids, "int32")
        self.lengths = ops.sum(ops.cast(ops.not_equal(prefix_ids, PAD_ID), "int32"), axis=1)
        self._ids = ops.pad(prefix_ids, [[0, 0], [0, 1]])  # column P: a step past every prefix

    def forced(self, t):
        """int32 [batch]: the id sentence b must take at step t, -1 once its prefix is done."""
        column = ops.minimum(t, ops.shape(self._ids)[1] - 1)
        return ops.where(t < self.lengths, ops.take(self._ids, column, axis=1), -1)


class GrowingSequences:
    """Hypotheses [..., t + 1] that grow by one column per step (concatenation): the graph
    TensorFlow runs without XLA, as in the SavedModel."""

    @staticmethod
    def append(sequences, tokens, t):
        return ops.concatenate([sequences, ops.expand_dims(ops.cast(tokens, "int32"), -1)],
                               axis=-1)

    @staticmethod
    def widen(sequences):
        """Finished hypotheses made as wide as this step's candidates (one PAD column)."""
        return ops.pad(sequences, [[0, 0], [0, 0], [0, 1]], constant_values=PAD_ID)


class FixedSequences:
    """Hypotheses in a buffer of fixed capacity (BOS, then PAD until written): step t writes
    column t + 1 in place, so every step has the same shapes (what XLA compiles once)."""

    @staticmethod
    def append(sequences, tokens, t):
        start = [0] * (len(sequences.shape) - 1) + [t + 1]
        return ops.slice_update(sequences, start, ops.expand_dims(ops.cast(tokens, "int32"), -1))

    @staticmethod
    def widen(sequences):
        return sequences


class BeamRules:
    """Beam search's decisions of one step (module docstring), for `batch` sentences of k beams.

    Args:
        k: the beam size.
        alpha: the length penalty's exponent (0: rank by log P(Y) alone).
        max_lengths: int [batch], the sentences' maximum |Y|.
        prefix_lengths: int [batch], the forced prefixes' lengths; None without prefixes.
        layout: `GrowingSequences` or `FixedSequences`.
        form: the length penalty's form, "gnmt" or "power" (`length_penalty`).
    """

    def __init__(self, k: int, alpha: float, max_lengths, prefix_lengths=None,
                 layout=GrowingSequences, form: str = PAPER.length_penalty_form):
        self.k = k
        self.alpha = alpha
        self.form = form
        self.max_lengths = max_lengths
        self.prefix_lengths = prefix_lengths
        self.layout = layout
        # |Y| of the length penalty counts what the search generated, not a forced prefix.
        generated = max_lengths if prefix_lengths is None else max_lengths - prefix_lengths
        self.best_possible_lp = length_penalty(generated, alpha, form)  # [batch]

    def initial_log_probs(self, batch):
        """float32 [batch, k]: only beam 0 is live at the start, so the first step does not
        pick k copies of one token."""
        first = ops.convert_to_tensor([0.0] + [NEG_INF] * (self.k - 1), "float32")
        return ops.tile(ops.expand_dims(first, 0), [batch, 1])

    def step(self, t, alive, alive_log_probs, finished, finished_scores, done, log_probs):
        """One step.

        Args:
            t: int32 scalar, the step (|Y| after it is t + 1).
            alive, finished: int32 [batch, k, L], the hypotheses with BOS.
            alive_log_probs, finished_scores: float32 [batch, k].
            done: bool [batch].
            log_probs: float32 [batch, k, vocab], the next token's, after `TokenRules`.

        Returns:
            (alive, alive_log_probs, finished, finished_scores, done, beams): beams int32
            [batch, k], the old beam each new alive one continues (for the decoder's cache).
        """
        k, batch, vocab = self.k, ops.shape(log_probs)[0], ops.shape(log_probs)[2]
        neg_inf = ops.cast(NEG_INF, "float32")
        positions = ops.expand_dims(ops.arange(2 * k), 0)
        candidates = ops.reshape(ops.expand_dims(alive_log_probs, 2) + log_probs,
                                 [batch, k * vocab])
        top_log_probs, top_indices = ops.top_k(candidates, k=2 * k)  # [batch, 2k]
        top_beams, top_tokens = top_indices // vocab, top_indices % vocab
        ends = ops.equal(top_tokens, EOS_ID)
        if self.prefix_lengths is not None:
            # The first step after a prefix finishes only its best candidate: an EOS ranked
            # below it becomes a dead beam, in its place.
            first_free = ops.logical_and(ops.equal(t, self.prefix_lengths),
                                         self.prefix_lengths > 0)
            dropped = ends & ops.expand_dims(first_free, 1) & (positions > 0)
            top_log_probs = ops.where(dropped, neg_inf, top_log_probs)
            top_tokens = ops.where(dropped, PAD_ID, top_tokens)
            ends = ends & ops.logical_not(dropped)
        top_sequences = self.layout.append(
            kernels.take_rows(alive, top_beams), top_tokens, t)

        # The first k candidates without EOS stay alive, in rank order (after a prefix, a dead
        # beam keeps its rank).
        if self.prefix_lengths is None:
            alive_log_probs, keep = ops.top_k(ops.where(ends, neg_inf, top_log_probs), k=k)
        else:
            _, keep = ops.top_k(ops.where(ends, -1, 2 * k - positions), k=k)
            alive_log_probs = kernels.take_rows(top_log_probs, keep)
        alive = kernels.take_rows(top_sequences, keep)
        beams = kernels.take_rows(top_beams, keep)

        # EOS among the top k finishes a hypothesis, unless its sentence is already done.
        eligible = ends & (positions < k) & (top_log_probs > neg_inf / 2)
        eligible = ops.logical_and(eligible, ops.expand_dims(ops.logical_not(done), 1))
        generated = t + 1 if self.prefix_lengths is None else ops.expand_dims(
            t + 1 - self.prefix_lengths, 1)
        new_scores = ops.where(
            eligible, top_log_probs / length_penalty(generated, self.alpha, self.form), neg_inf)
        finished_scores, best = ops.top_k(
            ops.concatenate([finished_scores, new_scores], axis=1), k=k)
        finished = kernels.take_rows(
            ops.concatenate([self.layout.widen(finished), top_sequences], axis=1), best)

        # Done: k finished and no alive hypothesis can still beat the worst of them.
        full = finished_scores[:, -1] > neg_inf / 2
        hopeless = alive_log_probs[:, 0] / self.best_possible_lp <= finished_scores[:, -1]
        done = done | (t + 1 >= self.max_lengths) | (full & hopeless)
        return alive, alive_log_probs, finished, finished_scores, done, ops.cast(beams, "int32")

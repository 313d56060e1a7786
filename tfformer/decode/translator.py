"""Translator: tokenizer + model + search, text in and text out, in one graph.

Used alike by training (dev BLEU), evaluation and the SavedModel export.
"""

from __future__ import annotations

import os
from typing import Sequence

import keras
import tensorflow as tf

from tfformer.config import DecodingConfig
from tfformer.contract import (
    ALIGN_SIGNATURE,
    DEFAULT_SIGNATURE,
    DOCUMENT_SIGNATURE,
    INPUT_DTYPES,
    INPUT_NAME,
    NBEST_K_NAME,
    NBEST_SIGNATURE,
    OUTPUT_ALIGNMENTS,
    OUTPUT_LENGTHS,
    OUTPUT_NORMALIZED_SCORES,
    OUTPUT_SCORES,
    OUTPUT_SENTENCES,
    OUTPUT_SPLITS,
    OUTPUT_TOKEN_SCORES,
    OUTPUT_TRANSLATIONS,
    PREFIX_SIGNATURE,
    PREFIXES_NAME,
    SAMPLE_SIGNATURE,
    SCORE_SIGNATURE,
    SEED_NAME,
    SIGNATURE_INPUTS,
    TARGETS_NAME,
    TEMPERATURE_NAME,
    TOP_K_NAME,
    TOP_P_NAME,
    TRANSLATE_SIGNATURE,
)
from tfformer.data.tokenizer import Tokenizer, load_tokenizer
from tfformer.decode import documents, scoring
from tfformer.decode.alignments import alignment_indices, pharaoh
from tfformer.decode.search import SearchResult, beam_search, greedy_search, sample_search
from tfformer.model.precision import check_inference_precision, dtype_policy
from tfformer.model.transformer import Transformer
from tfformer.special_tokens import EOS_ID, PAD_ID
from tfformer.utils.run_dir import RunDir


class Translator(tf.Module):
    """Text in, text out: tokenize, encode, search, detokenize, all in one graph.

    Args:
        model: a trained `Transformer`.
        tokenizer: the `Tokenizer` the model was trained with.
        beam_size: k; 1 means greedy search (default: `DecodingConfig`'s, 4 as in the paper).
        length_penalty: alpha (default 0.6, as in the paper).
        max_output_extra: maximum output length = input tokens + this (default 50).
        no_repeat_ngram: n > 0 forbids repeating an n-gram of pieces, in every search (default
            0: off).
        length_penalty_form: "gnmt" (§6.1, the default) or "power" (|Y| ** alpha, Hugging
            Face's generate).

    Call `translate(tf.constant([...]))` (a tf.function) for tensors, or `translate_texts` for
    Python strings. The other signatures of `tfformer.contract`, each input one value per
    sentence: `translate_nbest(inputs, k)` returns the k best hypotheses of the beam,
    `translate_sample(inputs, temperature, top_k, top_p, seed)` a sample,
    `translate_prefix(inputs, prefixes)` a translation that continues each prefix,
    `translate_align(inputs)` `translate`'s outputs and each translation's word alignment
    (`tfformer.decode.alignments`), `translate_document(inputs)` whole documents
    (`tfformer.decode.documents`), `score(inputs, targets)` given translations' log P
    (`tfformer.decode.scoring`).
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, beam_size: int | None = None,
                 length_penalty: float | None = None, max_output_extra: int | None = None,
                 no_repeat_ngram: int | None = None, length_penalty_form: str | None = None,
                 name: str = "translator"):
        super().__init__(name=name)
        config = model.transformer_config
        if tokenizer.vocab_size > config.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but the model's "
                             f"vocab_size is {config.vocab_size}")
        source_size = getattr(tokenizer, "source_vocab_size", tokenizer.vocab_size)
        if source_size > config.source_vocabulary_size:
            raise ValueError(f"tokenizer has {source_size} source ids but the model's source "
                             f"vocabulary has {config.source_vocabulary_size}")
        self.model = model
        self.tokenizer = tokenizer
        given = {"beam_size": beam_size, "length_penalty": length_penalty,
                 "max_output_extra": max_output_extra, "no_repeat_ngram": no_repeat_ngram,
                 "length_penalty_form": length_penalty_form}
        self.decoding = DecodingConfig(**{k: v for k, v in given.items() if v is not None})
        self.beam_size = self.decoding.beam_size
        self.length_penalty = self.decoding.length_penalty
        self.max_output_extra = self.decoding.max_output_extra
        self.no_repeat_ngram = self.decoding.no_repeat_ngram
        # A forced prefix and its continuation must fit the model's positions (BOS, EOS).
        self.max_prefix_pieces = model.transformer_config.max_length - 2
        # autograph=False: the searches are graph ops (one tf.while_loop), so converting their
        # Python (autograph) would only add seconds to every trace.
        self.translate = self._function(self._translate, DEFAULT_SIGNATURE)
        self.translate_nbest = self._function(self._translate_nbest, NBEST_SIGNATURE)
        self.translate_sample = self._function(self._translate_sample, SAMPLE_SIGNATURE)
        self.translate_prefix = self._function(self._translate_prefix, PREFIX_SIGNATURE)
        self.translate_align = self._function(self._translate_align, ALIGN_SIGNATURE)
        self.translate_document = self._function(self._translate_document, DOCUMENT_SIGNATURE)
        self.score = self._function(self._score, SCORE_SIGNATURE)

    @staticmethod
    def _function(method, signature: str):
        """A tf.function of `method` over the signature's inputs, each a vector [batch]."""
        return tf.function(method, autograph=False, input_signature=[
            tf.TensorSpec([None], tf.as_dtype(INPUT_DTYPES[name]), name=name)
            for name in SIGNATURE_INPUTS[signature]])

    def signature_functions(self) -> dict:
        """Signature name -> the tf.function that answers it, for every signature of
        `tfformer.contract` (the export saves them; its checks call them)."""
        return {DEFAULT_SIGNATURE: self.translate, TRANSLATE_SIGNATURE: self.translate,
                NBEST_SIGNATURE: self.translate_nbest, SAMPLE_SIGNATURE: self.translate_sample,
                PREFIX_SIGNATURE: self.translate_prefix, ALIGN_SIGNATURE: self.translate_align,
                DOCUMENT_SIGNATURE: self.translate_document, SCORE_SIGNATURE: self.score}

    def search(self, source_ids: tf.Tensor, n_best: int = 1,
               prefix_ids: tf.Tensor | None = None) -> SearchResult:
        """This translator's search (greedy when beam_size is 1) over encoded source ids;
        `n_best` (<= beam_size) hypotheses per sentence, after a forced `prefix_ids`."""
        if self.beam_size == 1:
            return greedy_search(self.model, source_ids, self.max_output_extra,
                                 no_repeat_ngram=self.no_repeat_ngram, prefix_ids=prefix_ids)
        return beam_search(self.model, source_ids, self.beam_size, self.length_penalty,
                           self.max_output_extra, n_best=n_best,
                           no_repeat_ngram=self.no_repeat_ngram, prefix_ids=prefix_ids,
                           length_penalty_form=self.decoding.length_penalty_form)

    def _source_ids(self, inputs):
        return self.tokenizer.encode_source(inputs).to_tensor(default_value=PAD_ID)

    def _best(self, result: SearchResult) -> dict[str, tf.Tensor]:
        """The outputs of a signature that answers one hypothesis a sentence: its best."""
        return {OUTPUT_TRANSLATIONS: self.tokenizer.detokenize(result.tokens[:, 0]),
                OUTPUT_SCORES: result.scores[:, 0]}

    def _translate(self, inputs):
        result = self.search(self._source_ids(inputs))
        return self._best(result)

    def _translate_nbest(self, inputs, k):
        inputs = _checked(NBEST_SIGNATURE, inputs, {NBEST_K_NAME: k}, [
            (tf.logical_and(k >= 1, k <= self.beam_size), NBEST_K_NAME,
             f"must be between 1 and the beam size ({self.beam_size}), got")])
        # The whole beam, then its first k: the first column is `translate`'s search, unchanged.
        result = self.search(self._source_ids(inputs), n_best=self.beam_size)
        width = tf.reduce_max(tf.concat([k, [1]], axis=0))  # an empty batch: [0, 1]
        tokens = result.tokens[:, :width]
        shape = tf.shape(tokens)
        texts = self.tokenizer.detokenize(tf.reshape(tokens, [shape[0] * shape[1], shape[2]]))
        wanted = tf.range(width)[tf.newaxis, :] < k[:, tf.newaxis]  # past a sentence's k: none
        return {OUTPUT_TRANSLATIONS: tf.where(wanted, tf.reshape(texts, shape[:2]), ""),
                OUTPUT_SCORES: tf.where(wanted, result.scores[:, :width], -float("inf"))}

    def _translate_sample(self, inputs, temperature, top_k, top_p, seed):
        inputs = _checked(SAMPLE_SIGNATURE, inputs, {
            TEMPERATURE_NAME: temperature, TOP_K_NAME: top_k, TOP_P_NAME: top_p, SEED_NAME: seed,
        }, [(tf.logical_and(temperature > 0, tf.math.is_finite(temperature)), TEMPERATURE_NAME,
             "must be a number above 0, got"),
            (top_k >= 0, TOP_K_NAME, "must be 0 (off) or more, got"),
            (tf.logical_and(top_p > 0, top_p <= 1), TOP_P_NAME, "must be in (0, 1], got"),
            (seed >= 0, SEED_NAME, "must be 0 or more, got")])
        result = sample_search(self.model, self._source_ids(inputs), temperature, top_k, top_p,
                               seed, self.max_output_extra, no_repeat_ngram=self.no_repeat_ngram)
        return self._best(result)

    def _translate_prefix(self, inputs, prefixes):
        pieces = self.tokenizer.tokenize(prefixes)
        inputs = _checked(PREFIX_SIGNATURE, inputs, {PREFIXES_NAME: prefixes}, [
            (pieces.row_lengths() <= self.max_prefix_pieces, PREFIXES_NAME,
             f"must each be at most {self.max_prefix_pieces} pieces long (the model's "
             f"max_length - 2), got lengths", pieces.row_lengths())])
        result = self.search(self._source_ids(inputs),
                             prefix_ids=pieces.to_tensor(default_value=PAD_ID))
        return self._best(result)

    def _translate_align(self, inputs):
        # The alignment's attention pass only here: `translate`'s graph stays the search alone.
        source_ids = self._source_ids(inputs)
        result = self.search(source_ids)
        indices = alignment_indices(self.model, source_ids, result.tokens[:, 0])
        return {**self._best(result), OUTPUT_ALIGNMENTS: pharaoh(indices)}

    def _translate_document(self, inputs):
        parts = documents.split_documents(inputs)
        sentence = documents.is_sentence(parts)
        sentences = tf.ragged.boolean_mask(parts, sentence)
        pieces = self.tokenizer.encode_source(sentences.flat_values)[:, :-1]  # EOS off
        # Sentences of no pieces (blank lines) stay empty; longer ones than the encoder takes
        # (its max_length, EOS included) go in consecutive parts.
        kept = tf.where(pieces.row_lengths() > 0)[:, 0]
        chunks, splits = documents.chunk_rows(
            tf.gather(pieces, kept), self.model.transformer_config.max_length - 1)
        source_ids = tf.concat([chunks, tf.fill([chunks.nrows(), 1], EOS_ID)], axis=1)
        result = self.search(source_ids.to_tensor(default_value=PAD_ID))
        texts = tf.RaggedTensor.from_row_lengths(
            self.tokenizer.detokenize(result.tokens[:, 0]), tf.cast(splits, tf.int64))
        scores = tf.RaggedTensor.from_row_lengths(result.scores[:, 0],
                                                  tf.cast(splits, tf.int64))
        count = tf.shape(pieces.row_lengths())[:1]
        at = kept[:, tf.newaxis]
        translated = tf.tensor_scatter_nd_update(
            tf.fill(count, ""), at, tf.strings.reduce_join(texts, axis=1, separator=" "))
        sentence_scores = tf.tensor_scatter_nd_update(tf.zeros(count), at,
                                                      tf.reduce_sum(scores, axis=1))
        sentence_splits = tf.tensor_scatter_nd_update(tf.zeros(count, tf.int32), at, splits)
        joined = tf.tensor_scatter_nd_update(
            parts.flat_values, tf.where(sentence.flat_values), translated)
        return {OUTPUT_TRANSLATIONS: tf.strings.reduce_join(parts.with_flat_values(joined),
                                                             axis=1),
                OUTPUT_SCORES: sentences.with_flat_values(sentence_scores).to_tensor(0.0),
                OUTPUT_SPLITS: sentences.with_flat_values(sentence_splits).to_tensor(0),
                OUTPUT_SENTENCES: tf.cast(sentences.row_lengths(), tf.int32)}

    def _score(self, inputs, targets):
        pieces = self.tokenizer.tokenize(targets)
        limit = scoring.max_target_pieces(self.model.transformer_config)
        inputs = _checked(SCORE_SIGNATURE, inputs, {TARGETS_NAME: targets}, [] if limit is None
                          else [(pieces.row_lengths() <= limit, TARGETS_NAME,
                                 f"must each be at most {limit} pieces long (max_length - 1), "
                                 f"got lengths", pieces.row_lengths())])
        token_scores, lengths = scoring.token_log_probs(
            self.model, self._source_ids(inputs), pieces.to_tensor(default_value=PAD_ID))
        scores, normalized = scoring.sequence_scores(token_scores, lengths)
        return {OUTPUT_SCORES: scores, OUTPUT_NORMALIZED_SCORES: normalized,
                OUTPUT_TOKEN_SCORES: token_scores, OUTPUT_LENGTHS: lengths}

    def score_texts(self, sources: Sequence[str], targets: Sequence[str]
                    ) -> list[tuple[float, float, list[float]]]:
        """(score, normalized score, token scores) of each (source, target) pair, in order
        (`score`). Raises ValueError for lists of different lengths; an over-long target
        fails in the graph (InvalidArgumentError naming `targets`)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
        if not len(sources):
            return []
        outputs = self.score(tf.constant(list(sources), tf.string),
                             tf.constant(list(targets), tf.string))
        token_scores, lengths = (outputs[name].numpy()
                                 for name in (OUTPUT_TOKEN_SCORES, OUTPUT_LENGTHS))
        return [(float(score), float(normalized), row[:length].tolist())
                for score, normalized, row, length in zip(
                    outputs[OUTPUT_SCORES].numpy(), outputs[OUTPUT_NORMALIZED_SCORES].numpy(),
                    token_scores, lengths)]

    def translate_texts(self, sentences: Sequence[str]) -> list[tuple[str, float]]:
        """Translates Python strings; returns (translation, score) pairs in order."""
        outputs = self.translate(tf.constant(list(sentences), tf.string))
        return [(text.decode("utf-8"), float(score)) for text, score in
                zip(outputs[OUTPUT_TRANSLATIONS].numpy(), outputs[OUTPUT_SCORES].numpy())]

    def translate_texts_aligned(self, sentences: Sequence[str]) -> list[tuple[str, float, str]]:
        """(translation, score, alignment) of each sentence, in order (`translate_align`)."""
        outputs = self.translate_align(tf.constant(list(sentences), tf.string))
        return [(text.decode("utf-8"), float(score), alignment.decode("utf-8"))
                for text, score, alignment in zip(outputs[OUTPUT_TRANSLATIONS].numpy(),
                                                  outputs[OUTPUT_SCORES].numpy(),
                                                  outputs[OUTPUT_ALIGNMENTS].numpy())]


# How many of an input's values an InvalidArgument error shows.
SHOWN_VALUES = 16


def _checked(signature: str, inputs: tf.Tensor, per_sentence: dict[str, tf.Tensor],
             conditions: list[tuple]) -> tf.Tensor:
    """`inputs`, once the graph has checked that each per-sentence input has one value per
    sentence and each condition (a bool vector, the input's name, what it must be ending in
    what the values show, and maybe other values to show than the input's) holds: otherwise
    an InvalidArgument error naming the input, which TF Serving answers as INVALID_ARGUMENT,
    before any search."""
    batch = tf.shape(inputs)[0]
    checks = [tf.debugging.Assert(
        tf.equal(tf.shape(values)[0], batch),
        [f"{signature}: {name} must have one value per sentence: {INPUT_NAME} has", batch,
         f"values and {name} has", tf.shape(values)[0]]) for name, values in per_sentence.items()]
    with tf.control_dependencies(checks):
        for condition, name, rule, *shown in conditions:
            values = shown[0] if shown else per_sentence[name]
            checks.append(tf.debugging.Assert(
                tf.reduce_all(condition), [f"{signature}: {name} {rule}", values],
                summarize=SHOWN_VALUES))
    with tf.control_dependencies(checks):
        return tf.identity(inputs)




def in_precision(model: Transformer, precision: str) -> Transformer:
    """The model with its weights stored and multiplied in `precision`: itself for "fp32", a
    copy under Keras' "bfloat16" policy for "bf16". The copy keeps in float32 what the mixed
    policies keep there: LayerNorm (Keras computes it in float32), the attention softmax and the
    logits (`tfformer.model.transformer`), hence the log-probabilities and the beam scores.

    bf16 halves the weights a decoding step reads; it multiplies faster only where the hardware
    does it natively (a CPU with AVX512_BF16 or AMX, a GPU, a TPU).
    """
    check_inference_precision(precision)
    if precision == "fp32":
        return model
    with dtype_policy("bfloat16"):  # variables and compute; not mixed: no float32 weights
        copy = Transformer(model.transformer_config, name=model.name)
        copy.build()
    copy.set_weights(model.get_weights())  # each weight rounded to bfloat16
    return copy


def load_translator(run_dir: str | os.PathLike, *, precision: str = "fp32",
                    **translator_kwargs) -> Translator:
    """Builds a Translator from a run dir: `model.keras` plus its tokenizer (`tokenizer.model`,
    or an imported model's vocabulary), its weights in `precision` (`in_precision`).

    Raises:
        FileNotFoundError: naming whichever file is missing.
        ValueError: an unknown precision.
    """
    check_inference_precision(precision)
    run = RunDir(run_dir)
    run.require_model()
    tokenizer = load_tokenizer(run)
    model = keras.models.load_model(run.model, compile=False)
    return Translator(in_precision(model, precision), tokenizer, **translator_kwargs)

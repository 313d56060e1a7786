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
    INPUT_NAME,
    NBEST_K_NAME,
    NBEST_SIGNATURE,
    OUTPUT_SCORES,
    OUTPUT_TRANSLATIONS,
)
from tfformer.data.tokenizer import Tokenizer
from tfformer.decode.search import SearchResult, beam_search, greedy_search
from tfformer.model.precision import check_inference_precision, dtype_policy
from tfformer.model.transformer import Transformer
from tfformer.special_tokens import PAD_ID
from tfformer.utils.run_dir import RunDir


class Translator(tf.Module):
    """Text in, text out: tokenize, encode, search, detokenize, all in one graph.

    Args:
        model: a trained `Transformer`.
        tokenizer: the `Tokenizer` the model was trained with.
        beam_size: k; 1 means greedy search (default: `DecodingConfig`'s, 4 as in the paper).
        length_penalty: alpha (default 0.6, as in the paper).
        max_output_extra: maximum output length = input tokens + this (default 50).

    Call `translate(tf.constant([...]))` (a tf.function) for tensors, or `translate_texts` for
    Python strings; `translate_nbest(inputs, k)` returns the k best hypotheses of the beam.
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, beam_size: int | None = None,
                 length_penalty: float | None = None, max_output_extra: int | None = None,
                 name: str = "translator"):
        super().__init__(name=name)
        config = model.transformer_config
        if tokenizer.vocab_size > config.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but the model's "
                             f"vocab_size is {config.vocab_size}")
        self.model = model
        self.tokenizer = tokenizer
        given = {"beam_size": beam_size, "length_penalty": length_penalty,
                 "max_output_extra": max_output_extra}
        self.decoding = DecodingConfig(**{k: v for k, v in given.items() if v is not None})
        self.beam_size = self.decoding.beam_size
        self.length_penalty = self.decoding.length_penalty
        self.max_output_extra = self.decoding.max_output_extra
        # autograph=False: the searches are graph ops (one tf.while_loop), so converting their
        # Python (autograph) would only add seconds to every trace.
        self.translate = tf.function(
            self._translate, input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)],
            autograph=False)
        self.translate_nbest = tf.function(
            self._translate_nbest,
            input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME),
                             tf.TensorSpec([], tf.int32, name=NBEST_K_NAME)], autograph=False)

    def search(self, source_ids: tf.Tensor, n_best: int = 1) -> SearchResult:
        """This translator's search (greedy when beam_size is 1) over encoded source ids;
        `n_best` (<= beam_size) hypotheses per sentence."""
        if self.beam_size == 1:
            return greedy_search(self.model, source_ids, self.max_output_extra)
        return beam_search(self.model, source_ids, self.beam_size, self.length_penalty,
                           self.max_output_extra, n_best=n_best)

    def _translate(self, inputs):
        source_ids = self.tokenizer.encode_source(inputs).to_tensor(default_value=PAD_ID)
        result = self.search(source_ids)
        return {OUTPUT_TRANSLATIONS: self.tokenizer.detokenize(result.tokens[:, 0]),
                OUTPUT_SCORES: result.scores[:, 0]}

    def _translate_nbest(self, inputs, k):
        # In the graph, for TF Serving too: an InvalidArgument error before any search.
        in_range = tf.debugging.Assert(
            tf.logical_and(k >= 1, k <= self.beam_size),
            [f"{NBEST_SIGNATURE}: {NBEST_K_NAME} must be between 1 and the beam size "
             f"({self.beam_size}), got", k])
        with tf.control_dependencies([in_range]):
            inputs = tf.identity(inputs)
        source_ids = self.tokenizer.encode_source(inputs).to_tensor(default_value=PAD_ID)
        # The whole beam, then its first k: the first column is `translate`'s search, unchanged.
        result = self.search(source_ids, n_best=self.beam_size)
        tokens = result.tokens[:, :k]
        shape = tf.shape(tokens)
        texts = self.tokenizer.detokenize(tf.reshape(tokens, [shape[0] * shape[1], shape[2]]))
        return {OUTPUT_TRANSLATIONS: tf.reshape(texts, shape[:2]),
                OUTPUT_SCORES: result.scores[:, :k]}

    def translate_texts(self, sentences: Sequence[str]) -> list[tuple[str, float]]:
        """Translates Python strings; returns (translation, score) pairs in order."""
        outputs = self.translate(tf.constant(list(sentences), tf.string))
        return [(text.decode("utf-8"), float(score)) for text, score in
                zip(outputs[OUTPUT_TRANSLATIONS].numpy(), outputs[OUTPUT_SCORES].numpy())]




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
    """Builds a Translator from a training run dir: `model.keras` plus `tokenizer.model`, its
    weights in `precision` (`in_precision`).

    Raises:
        FileNotFoundError: naming whichever of the two files is missing.
        ValueError: an unknown precision.
    """
    check_inference_precision(precision)
    run = RunDir(run_dir)
    for path in (run.model, run.tokenizer):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found: a run dir needs "
                                    f"{os.path.basename(run.model)} and "
                                    f"{os.path.basename(run.tokenizer)}")
    tokenizer = Tokenizer.from_file(run.tokenizer)
    model = keras.models.load_model(run.model, compile=False)
    return Translator(in_precision(model, precision), tokenizer, **translator_kwargs)

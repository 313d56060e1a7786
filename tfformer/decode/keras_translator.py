"""Translating text with the `keras.ops` searches (`tfformer.decode.keras_search`, compiled under
JAX) on any Keras backend, and `translator_for`, which picks the in-graph `Translator` where
TensorFlow runs the model and this one elsewhere."""

from __future__ import annotations

import os
from typing import Sequence

from tfformer.config import DecodingConfig
from tfformer.decode import keras_search, scoring
from tfformer.utils.backends import on_tensorflow
from tfformer.utils.run_dir import RunDir


class KerasTranslator:
    """A model and its SentencePiece vocabulary, searched in `keras.ops`.

    Args:
        model: a `Transformer` on any backend.
        tokenizer: a `tfformer.data.pieces.SentencePieces` or a `Tokenizer`.
        beam_size, length_penalty, max_output_extra, no_repeat_ngram, length_penalty_form:
            the search (default: the paper's, `DecodingConfig`).
    """

    def __init__(self, model, tokenizer, **decoding):
        self.model, self.tokenizer = model, tokenizer
        self.decoding = DecodingConfig(**{k: v for k, v in decoding.items() if v is not None})

    def translate_texts(self, sentences: Sequence[str]) -> list[tuple[str, float]]:
        """(translation, score) of each sentence, in order."""
        return keras_search.translate_texts(
            self.model, self.tokenizer, sentences, self.decoding.max_output_extra,
            self.decoding.beam_size, self.decoding.length_penalty,
            self.decoding.no_repeat_ngram, self.decoding.length_penalty_form)

    def translate_texts_aligned(self, sentences: Sequence[str]) -> list[tuple[str, float, str]]:
        """(translation, score, alignment) of each sentence, in order, as the export's
        `translate_align` gives them."""
        return keras_search.translate_texts_aligned(
            self.model, self.tokenizer, sentences, self.decoding.max_output_extra,
            self.decoding.beam_size, self.decoding.length_penalty,
            self.decoding.no_repeat_ngram, self.decoding.length_penalty_form)


    def score_texts(self, sources: Sequence[str], targets: Sequence[str]
                    ) -> list[tuple[float, float, list[float]]]:
        """(score, normalized score, token scores) of each (source, target) pair, in order, as
        the export's `score` gives them (`tfformer.decode.scoring`)."""
        return scoring.score_texts(self.model, self.tokenizer, sources, targets)


def translator_for(model, tokenizer, **decoding):
    """The in-graph `Translator` where TensorFlow runs the model (the export's search), else an
    `KerasTranslator`: either has `translate_texts`, `translate_texts_aligned`, `score_texts`
    and `decoding`."""
    if on_tensorflow():
        from tfformer.decode.translator import Translator

        return Translator(model, tokenizer, **decoding)
    return KerasTranslator(model, tokenizer, **decoding)


def load_keras_translator(run_dir: str | os.PathLike, **decoding) -> KerasTranslator:
    """A KerasTranslator of a run directory's model.keras and tokenizer (tokenizer.model, or an
    imported model's vocabulary), without TensorFlow.

    Raises:
        FileNotFoundError: naming whichever file is missing.
    """
    import keras

    from tfformer.data.pieces import load_pieces
    from tfformer.model.transformer import Transformer  # registered for load_model

    run = RunDir(run_dir)
    run.require_model()
    model = keras.models.load_model(run.model, compile=False)
    if not isinstance(model, Transformer):
        raise ValueError(f"{run.model} is a {type(model).__name__}, not a tfformer Transformer")
    return KerasTranslator(model, load_pieces(run), **decoding)

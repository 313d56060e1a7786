"""Keras callbacks for translation training: dev BLEU, an exact step budget, a deadline.

The epoch checkpoints' callback is `tfformer.train.checkpoints.KeepLastCheckpoints`.
"""

from __future__ import annotations

import logging
from typing import Sequence

import keras
import sacrebleu

from tfformer.decode.batch_translate import translate_in_batches
from tfformer.decode.keras_translator import translator_for

logger = logging.getLogger(__name__)


class DevBleu(keras.callbacks.Callback):
    """Translates dev sentences after each epoch and adds `dev_bleu` (sacreBLEU) to the logs.

    Args:
        tokenizer: the run's Tokenizer (or, without TensorFlow, its SentencePieces).
        pairs: (source, reference) dev pairs; the first `max_sentences` are decoded.
        max_sentences: how many to decode (with the cache, in batches: in the graph on
            TensorFlow, step by step in `keras.ops` on other backends; the same tokens).
        beam_size: 1 for greedy search, else beam search with the paper's length penalty.
        batch_size: sentences per search call.
        num_samples: how many (source, hypothesis, reference) triples to log.
    """

    def __init__(self, tokenizer, pairs: Sequence[tuple[str, str]], max_sentences: int = 200,
                 batch_size: int = 64, num_samples: int = 3, beam_size: int = 1):
        super().__init__()
        self.beam_size = beam_size
        self.tokenizer = tokenizer
        self.pairs = list(pairs)[:max_sentences]
        self.batch_size = batch_size
        self.num_samples = num_samples
        self.samples: list[tuple[str, str, str]] = []
        self._translator = None

    def _translate_batch(self, sources: Sequence[str]) -> list[tuple[str, float]]:
        if self._translator is None or self._translator.model is not self.model:
            self._translator = translator_for(self.model, self.tokenizer,
                                              beam_size=self.beam_size)
        return self._translator.translate_texts(sources)

    def translate(self, sources: Sequence[str]) -> list[str]:
        return [text for batch in translate_in_batches(self._translate_batch, sources,
                                                       self.batch_size)
                for text, _ in batch]

    def on_epoch_end(self, epoch, logs=None):
        if not self.pairs:
            return
        sources = [s for s, _ in self.pairs]
        references = [t for _, t in self.pairs]
        hypotheses = self.translate(sources)
        bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
        self.samples = list(zip(sources, hypotheses, references))[:self.num_samples]
        if logs is not None:
            logs["dev_bleu"] = bleu
        logger.info("epoch %d: dev BLEU %.2f on %d sentences", epoch + 1, bleu, len(sources))
        for source, hypothesis, reference in self.samples:
            logger.info("  src: %s\n  hyp: %s\n  ref: %s", source, hypothesis, reference)



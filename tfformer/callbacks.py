"""Keras callbacks for translation training: dev BLEU, bounded checkpoints, exact step budget."""

from __future__ import annotations

import glob
import logging
import os
import time
from typing import Sequence

import keras
import numpy as np
import sacrebleu

from tfformer import eager_search
from tfformer.files import atomic_write, remove_temporaries
from tfformer.layers.kernels import ON_TENSORFLOW
from tfformer.run_state import optimizer_step

logger = logging.getLogger(__name__)


class DevBleu(keras.callbacks.Callback):
    """Greedy-decodes dev sentences after each epoch and adds `dev_bleu` (sacreBLEU) to the logs.

    Args:
        tokenizer: the run's Tokenizer.
        pairs: (source, reference) dev pairs; the first `max_sentences` are decoded.
        max_sentences: how many to decode (greedy, with the cache, in batches: in the graph
            on TensorFlow, step by step in `keras.ops` on other backends).
        batch_size: sentences per search call.
        num_samples: how many (source, hypothesis, reference) triples to log.
    """

    def __init__(self, tokenizer, pairs: Sequence[tuple[str, str]], max_sentences: int = 200,
                 batch_size: int = 64, num_samples: int = 3):
        super().__init__()
        self.tokenizer = tokenizer
        self.pairs = list(pairs)[:max_sentences]
        self.batch_size = batch_size
        self.num_samples = num_samples
        self.samples: list[tuple[str, str, str]] = []
        self._translator = None

    def _translate_batch(self, sources: Sequence[str]) -> list[tuple[str, float]]:
        if not ON_TENSORFLOW:
            return eager_search.translate_texts(self.model, self.tokenizer, sources)
        if self._translator is None or self._translator.model is not self.model:
            from tfformer.translator import Translator

            self._translator = Translator(self.model, self.tokenizer, beam_size=1)
        return self._translator.translate_texts(sources)

    def translate(self, sources: Sequence[str]) -> list[str]:
        hypotheses = []
        for start in range(0, len(sources), self.batch_size):
            batch = sources[start:start + self.batch_size]
            hypotheses += [text for text, _ in self._translate_batch(batch)]
        return hypotheses

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


class KeepLastCheckpoints(keras.callbacks.Callback):
    """Saves the weights after each epoch, atomically, and keeps only the newest `keep` files.

    Args:
        directory: where `ckpt-EPOCH.weights.h5` files go (EPOCH counts from 1).
        keep: how many to keep (the paper averages the last 5, §6.1).
    """

    PATTERN = "ckpt-{epoch:05d}.weights.h5"

    def __init__(self, directory: str, keep: int = 5):
        super().__init__()
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = directory
        self.keep = keep
        remove_temporaries(directory)

    def on_epoch_end(self, epoch, logs=None):
        # An epoch redone after a kill replaces its checkpoint whole (written aside, renamed).
        path = os.path.join(self.directory, self.PATTERN.format(epoch=epoch + 1))
        atomic_write(path, self.model.save_weights)
        for stale in list_checkpoints(self.directory)[:-self.keep]:
            os.remove(stale)


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint files written by KeepLastCheckpoints, oldest first."""
    return sorted(glob.glob(os.path.join(directory, "ckpt-*.weights.h5")))


class StopAtStep(keras.callbacks.Callback):
    """Stops training once the optimizer has made `total_steps` updates, so that the last epoch
    may be shorter than the others and every run ends at exactly `total_steps`."""

    def __init__(self, total_steps: int):
        super().__init__()
        self.total_steps = total_steps

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model) >= self.total_steps:
            self.model.stop_training = True


class StopAtTime(keras.callbacks.Callback):
    """Stops training in time for the run to end by a deadline, epoch-end work included.

    Checked after every batch: training stops once the time left is less than what the last
    epoch end took (validation, dev BLEU, checkpoints: they run after the stop too), so the run
    ends near the deadline instead of one epoch-end's work after it.

    Args:
        deadline: the end, in seconds of `clock`.
        clock: the time source (`time.monotonic`).

    Attributes:
        stopped: whether this callback stopped training.
    """

    def __init__(self, deadline: float, clock=time.monotonic):
        super().__init__()
        self.deadline = deadline
        self.clock = clock
        self.stopped = False
        self._epoch_end_cost = 0.0
        self._last_batch_end: float | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._last_batch_end is not None:
            self._epoch_end_cost = self.clock() - self._last_batch_end

    def on_train_batch_end(self, batch, logs=None):
        self._last_batch_end = now = self.clock()
        if now + self._epoch_end_cost >= self.deadline:
            self.stopped = True
            self.model.stop_training = True


def average_checkpoints(model: keras.Model, paths: Sequence[str]) -> keras.Model:
    """Sets `model`'s weights to the element-wise mean of the checkpoints at `paths` (§6.1).

    Args:
        model: a built model with the checkpoints' architecture.
        paths: `.weights.h5` files saved by `model.save_weights` / KeepLastCheckpoints.

    Returns:
        the same model, holding the averaged weights.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    total = None
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"checkpoint {path} not found")
        model.load_weights(path)
        weights = [keras.ops.convert_to_numpy(w).astype(np.float64) for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    for variable, summed in zip(model.weights, total):
        # Float weights are averaged; integer state (e.g. dropout seeds) keeps the last value.
        if "float" in str(variable.dtype):
            variable.assign((summed / len(paths)).astype(variable.dtype))
    return model

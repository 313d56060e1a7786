"""Keras callbacks for translation training: dev BLEU, bounded checkpoints, exact step budget."""

from __future__ import annotations

import glob
import logging
import os
from typing import Sequence

import keras
import sacrebleu
import tensorflow as tf

from tfformer.export import Translator

logger = logging.getLogger(__name__)


class DevBleu(keras.callbacks.Callback):
    """Greedy-decodes dev sentences after each epoch and adds `dev_bleu` (sacreBLEU) to the logs.

    Args:
        tokenizer: the run's Tokenizer.
        pairs: (source, reference) dev pairs; the first `max_sentences` are decoded.
        max_sentences: how many to decode (greedy, with the cache, in batches).
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

    def translate(self, sources: Sequence[str]) -> list[str]:
        if self._translator is None or self._translator.model is not self.model:
            self._translator = Translator(self.model, self.tokenizer, beam_size=1)
        hypotheses = []
        for start in range(0, len(sources), self.batch_size):
            batch = sources[start:start + self.batch_size]
            hypotheses += [text for text, _ in self._translator.translate_texts(batch)]
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


class KeepLastCheckpoints(keras.callbacks.ModelCheckpoint):
    """`ModelCheckpoint` of weights each epoch that keeps only the newest `keep` files.

    Args:
        directory: where `ckpt-EPOCH.weights.h5` files go.
        keep: how many to keep (the paper averages the last 5, §6.1).
    """

    PATTERN = "ckpt-{epoch:05d}.weights.h5"

    def __init__(self, directory: str, keep: int = 5, **kwargs):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        os.makedirs(directory, exist_ok=True)
        super().__init__(os.path.join(directory, self.PATTERN), save_weights_only=True, **kwargs)
        self.directory = directory
        self.keep = keep

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        for stale in list_checkpoints(self.directory)[:-self.keep]:
            os.remove(stale)


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint files written by KeepLastCheckpoints, oldest first."""
    return sorted(glob.glob(os.path.join(directory, "ckpt-*.weights.h5")))


def optimizer_step(model: keras.Model) -> int:
    """The optimizer's update count, also for a MirroredVariable (where int() fails)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class StopAtStep(keras.callbacks.Callback):
    """Stops training once the optimizer has made `total_steps` updates.

    With BackupAndRestore, a run killed mid-epoch restarts that epoch from its first batch but
    with the optimizer's step count restored; stopping on the step count (not on epochs) makes
    the resumed run end at the same step as an uninterrupted one.
    """

    def __init__(self, total_steps: int):
        super().__init__()
        self.total_steps = total_steps

    def on_train_begin(self, logs=None):
        # Runs after BackupAndRestore has restored the step count. A restored run that already
        # reached the budget must not take even one more step: start past the last epoch (the
        # attribute BackupAndRestore itself sets to resume).
        step = optimizer_step(self.model)
        logger.info("starting at step %d of %d", step, self.total_steps)
        if step >= self.total_steps:
            self.model._initial_epoch = self.params["epochs"]

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model) >= self.total_steps:
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
        weights = [tf.cast(w, tf.float64).numpy() for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    for variable, summed in zip(model.weights, total):
        # Float weights are averaged; integer state (e.g. dropout seeds) keeps the last value.
        if "float" in str(variable.dtype):
            variable.assign((summed / len(paths)).astype(variable.dtype))
    return model

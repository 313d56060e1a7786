"""Putting the model, the objective and the optimizer together for `model.fit`."""

from __future__ import annotations

import keras

from tfformer.losses import MaskedAccuracy, MaskedLabelSmoothedCrossEntropy, Perplexity
from tfformer.model import Transformer
from tfformer.schedule import paper_optimizer


def compile_transformer(model: Transformer, optimizer: keras.optimizers.Optimizer | None = None,
                        **compile_kwargs) -> Transformer:
    """Compiles `model` with the paper's loss (§5.4) and, by default, its optimizer (§5.3).

    Args:
        model: the Transformer; its config gives label smoothing, d_model and warmup.
        optimizer: defaults to `paper_optimizer(d_model, warmup_steps)`.
        **compile_kwargs: passed to `keras.Model.compile` (e.g. jit_compile, steps_per_execution).

    Returns:
        the same model, compiled, with masked accuracy and perplexity as metrics.
    """
    config = model.transformer_config
    model.compile(
        optimizer=optimizer or paper_optimizer(config.d_model, config.warmup_steps),
        loss=MaskedLabelSmoothedCrossEntropy(config.label_smoothing),
        metrics=[MaskedAccuracy(), Perplexity()],
        **compile_kwargs)
    return model

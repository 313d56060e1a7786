"""Putting the model, the objective (§5.4) and the optimizer (§5.3) together for `model.fit`."""

from __future__ import annotations

import keras

from tfformer.config import PAPER_WARMUP_STEPS
from tfformer.model.losses import MaskedAccuracy, MaskedLabelSmoothedCrossEntropy, Perplexity
from tfformer.model.schedule import paper_optimizer
from tfformer.model.transformer import Transformer


def compile_transformer(model: Transformer, optimizer: keras.optimizers.Optimizer | None = None,
                        *, label_smoothing: float = 0.1,
                        warmup_steps: int = PAPER_WARMUP_STEPS,
                        **compile_kwargs) -> Transformer:
    """Compiles `model` with the paper's loss (§5.4) and, by default, its optimizer (§5.3).

    Args:
        model: the Transformer (its config gives d_model).
        optimizer: defaults to `paper_optimizer(d_model, warmup_steps)`.
        label_smoothing: epsilon_ls of the loss (0.1 in the paper); the config's
            `bos_in_softmax` goes to the loss and the perplexity.
        warmup_steps: warmup of the default optimizer's schedule (4000 in the paper).
        **compile_kwargs: passed to `keras.Model.compile` (e.g. jit_compile, steps_per_execution).

    Returns:
        the same model, compiled, with masked accuracy and perplexity as metrics.
    """
    config = model.transformer_config
    model.compile(
        optimizer=optimizer or paper_optimizer(config.d_model, warmup_steps),
        loss=MaskedLabelSmoothedCrossEntropy(label_smoothing,
                                             bos_in_softmax=config.bos_in_softmax),
        metrics=[MaskedAccuracy(), Perplexity(bos_in_softmax=config.bos_in_softmax)],
        **compile_kwargs)
    return model

"""tfformer: the Transformer of "Attention Is All You Need" for translation on Keras 3 / TF 2.

`import tfformer` imports nothing heavy: the names below load their modules (and Keras, on the
backend KERAS_BACKEND names) when first used, so that a program can choose the backend after
importing tfformer, and the model side runs where TensorFlow is not installed. Keras finds
tfformer's classes in a saved `.keras` file once they are loaded: use `tfformer.Transformer`
(or import `tfformer.model.transformer`) before `keras.models.load_model`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tfformer.utils import imports as _imports

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "PRESETS": "tfformer.config",
    "TransformerConfig": "tfformer.config",
    "get_preset": "tfformer.config",
    "MaskedAccuracy": "tfformer.model.losses",
    "MaskedLabelSmoothedCrossEntropy": "tfformer.model.losses",
    "Perplexity": "tfformer.model.losses",
    "Transformer": "tfformer.model.transformer",
    "NoamSchedule": "tfformer.model.schedule",
    "paper_optimizer": "tfformer.model.schedule",
    "compile_transformer": "tfformer.model.compile_transformer",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from tfformer.config import PRESETS, TransformerConfig, get_preset  # noqa: F401
    from tfformer.model.compile_transformer import compile_transformer  # noqa: F401
    from tfformer.model.losses import (  # noqa: F401
        MaskedAccuracy,
        MaskedLabelSmoothedCrossEntropy,
        Perplexity,
    )
    from tfformer.model.schedule import NoamSchedule, paper_optimizer  # noqa: F401
    from tfformer.model.transformer import Transformer  # noqa: F401

_imports.install()


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tfformer' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)

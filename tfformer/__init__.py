"""tfformer: the Transformer of "Attention Is All You Need" for translation on Keras 3 / TF 2."""

from tfformer.config import PRESETS, TransformerConfig, get_preset
from tfformer.losses import MaskedAccuracy, MaskedLabelSmoothedCrossEntropy, Perplexity
from tfformer.model import Transformer
from tfformer.schedule import NoamSchedule, paper_optimizer
from tfformer.training import compile_transformer

__version__ = "0.1.0"

__all__ = [
    "MaskedAccuracy", "MaskedLabelSmoothedCrossEntropy", "NoamSchedule", "PRESETS", "Perplexity",
    "Transformer", "TransformerConfig", "compile_transformer", "get_preset", "paper_optimizer",
]

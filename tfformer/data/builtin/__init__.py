"""The built-in synthetic Spanish→English corpus, which needs no download (data spec ``builtin``).

Its words are in `vocabulary`, the rules that make sentences of them in `grammar`; pure Python,
no TensorFlow.
"""

from tfformer.data.builtin.grammar import SPLIT_SIZES, builtin_pairs, iter_pairs

__all__ = ["SPLIT_SIZES", "builtin_pairs", "iter_pairs"]

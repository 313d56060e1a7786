"""From a trained model to text: the searches of §6.1 (`rules`: every decision of a search step,
written once; `loop`: one loop per strategy in `keras.ops`, over a growing or a fixed-capacity
layout; `search`: greedy, sampling and beam search as one TensorFlow graph, the form the export
saves; `keras_search`: the same loops on any backend, compiled under JAX), the `translator`
(tokenizer + model + search, text in and out; `keras_translator` on any backend), translation a
batch at a time (`batch_translate`) and the attention weights behind a translation
(`attention_maps`). Import the module you use.
"""

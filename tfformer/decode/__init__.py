"""From a trained model to text: the searches of §6.1 (`search`: greedy and beam in one
TensorFlow graph, the form the export saves; `eager_search`: greedy in `keras.ops`, on any
backend), the `translator` (tokenizer + model + search, text in and out), translation a batch
at a time (`batch_translate`) and the attention weights behind a translation
(`attention_maps`). Import the module you use.
"""

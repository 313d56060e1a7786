"""What tests/mirrored_fit.py (TensorFlow) and tests/jax_data_parallel_fit.py (JAX) share: a
small model, batches from the real data pipeline with an even number of rows (one per device of
two), its initial weights, and a recorder of the loss of every batch."""

import keras

from tfformer import Transformer, TransformerConfig
from tfformer.data.batching import make_dataset
from tfformer.data.builtin import builtin_pairs
from tfformer.data.tokenizer import Tokenizer


def small_setup():
    """(config, dataset of batches with a multiple of 2 rows, initial weights)."""
    keras.utils.set_random_seed(0)
    pairs = builtin_pairs("train", n=600)
    tokenizer = Tokenizer.train([s for p in pairs for s in p], 300)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=32, num_heads=2,
                               d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
                               dropout=0.0, max_length=64)
    dataset, _ = make_dataset(pairs, tokenizer, batch_tokens=600, max_length=64,
                              shuffle=False, batch_multiple=2)
    initial = Transformer(config)
    initial.build()
    return config, dataset, initial.get_weights()


class BatchLosses(keras.callbacks.Callback):
    """The loss of every training batch, across fits."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))

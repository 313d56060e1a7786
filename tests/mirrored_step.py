"""One training step on 2 logical CPU devices under MirroredStrategy vs one device.

Run as a script by tests/test_losses.py; prints a JSON report on its last line.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfformer import Transformer, TransformerConfig, compile_transformer  # noqa: E402
from tfformer.model.losses import label_smoothed_cross_entropy  # noqa: E402

config = TransformerConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                           num_decoder_layers=1, dropout=0.0)
rng = np.random.default_rng(0)
source = rng.integers(4, 30, size=(4, 6)).astype("int32")
target_in = rng.integers(4, 30, size=(4, 5)).astype("int32")
target_in[:, 0] = 2
target_out = rng.integers(4, 30, size=(4, 5)).astype("int32")
target_out[0, 2:] = 0  # replica 0 gets sentences 0-1 (7 tokens), replica 1 gets 2-3 (10 tokens)
target_in[0, 3:] = 0
target_out[1, 4:] = 0
target_in[1, 5:] = 0

keras.utils.set_random_seed(1)
initial = Transformer(config)
initial.build()
initial_weights = initial.get_weights()


def one_step(strategy):
    with strategy.scope():
        model = Transformer(config)
        model.build()
        model.set_weights(initial_weights)
        # Plain SGD: the applied update is the gradient itself. (Adam's first step is about
        # lr * sign(g), which would turn float noise in near-zero gradients into full-size steps.)
        compile_transformer(model, optimizer=keras.optimizers.SGD(learning_rate=1.0))
    dataset = tf.data.Dataset.from_tensors(((source, target_in), target_out))
    history = model.fit(dataset, epochs=1, verbose=0)
    return history.history["loss"][0], model.get_weights()


mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
mirrored_loss, mirrored_weights = one_step(mirrored)
single_loss, single_weights = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"))
before = Transformer(config)
before.build()
before.set_weights(initial_weights)
per_token = label_smoothed_cross_entropy(target_out, before((source, target_in)), 0.1).numpy()
mask = target_out != 0
print(json.dumps({
    "replicas": mirrored.num_replicas_in_sync,
    "tokens_per_replica": [int(mask[:2].sum()), int(mask[2:].sum())],
    "mirrored_loss": float(mirrored_loss),
    "single_loss": float(single_loss),
    "numpy_loss": float(per_token[mask].mean()),
    "max_update_diff": max(float(np.abs(a - b).max())
                           for a, b in zip(mirrored_weights, single_weights)),
    "max_update": max(float(np.abs(a - b).max())
                      for a, b in zip(mirrored_weights, initial_weights)),
}))

"""A few `fit` steps on the real data pipeline: 2 logical CPUs (MirroredStrategy) vs 1 device.

Run as a script by tests/test_training.py; prints a JSON report on its last line.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfformer.train.devices import select_strategy, split_cpu  # noqa: E402

split_cpu(2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tests.small_fit import BatchLosses, small_setup  # noqa: E402
from tfformer import Transformer, compile_transformer  # noqa: E402
from tfformer.train.state import optimizer_step  # noqa: E402

config, dataset, initial_weights = small_setup()
batches = list(dataset.take(4))


def run(strategy):
    with strategy.scope():
        model = Transformer(config)
        model.build()
        model.set_weights(initial_weights)
        # SGD: weights then differ only by the gradients' float noise (Adam's early steps are
        # ~lr * sign(g), which turns that noise in near-zero gradients into full steps).
        compile_transformer(model, optimizer=keras.optimizers.SGD(learning_rate=0.5))
    recorder = BatchLosses()
    data = tf.data.Dataset.from_generator(lambda: iter(batches),
                                          output_signature=dataset.element_spec)
    # steps_per_epoch: a generator's length is unknown, and running into its end costs Keras
    # one extra (empty) optimizer iteration.
    model.fit(data, epochs=1, steps_per_epoch=len(batches), verbose=0, callbacks=[recorder])
    return recorder.losses, model.get_weights(), optimizer_step(model)


mirrored = select_strategy()
mirrored_losses, mirrored_weights, mirrored_steps = run(mirrored)
single_losses, single_weights, single_steps = run(tf.distribute.OneDeviceStrategy("/cpu:0"))
print(json.dumps({
    "strategy": type(mirrored).__name__, "replicas": mirrored.num_replicas_in_sync,
    "batch_sizes": [int(b[1].shape[0]) for b in batches],
    "mirrored_losses": mirrored_losses, "single_losses": single_losses,
    "steps": [mirrored_steps, single_steps],
    "max_weight_diff": max(float(np.abs(a - b).max())
                           for a, b in zip(mirrored_weights, single_weights)),
}))

"""A few `fit` steps on the real data pipeline under JAX: keras.distribution.DataParallel over
2 host devices vs 1 device, on the same batches and initial weights.

Run as a script by tests/test_jax_training.py (it sets KERAS_BACKEND=jax); prints a JSON report
on its last line.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfformer.train.devices import place  # noqa: E402

placement = place("jax", 2)  # XLA_FLAGS: two host devices, before JAX starts

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from tests.small_fit import BatchLosses, small_setup  # noqa: E402
from tfformer import Transformer, compile_transformer  # noqa: E402
from tfformer.train.state import optimizer_step  # noqa: E402

assert keras.backend.backend() == "jax"
config, dataset, initial_weights = small_setup()
batches = [((s.numpy(), t.numpy()), y.numpy()) for (s, t), y in dataset.take(4)]


def run():
    model = Transformer(config)
    model.build()
    model.set_weights(initial_weights)
    # SGD: weights then differ only by the gradients' float noise (Adam's early steps are
    # ~lr * sign(g), which turns that noise in near-zero gradients into full steps).
    compile_transformer(model, optimizer=keras.optimizers.SGD(learning_rate=0.5))
    recorder = BatchLosses()
    for inputs, labels in batches:  # one fit per batch: each batch has its own shape
        model.fit(inputs, labels, batch_size=len(labels), epochs=1, verbose=0, shuffle=False,
                  callbacks=[recorder])
    # DataParallel keeps a replica of every weight on each device.
    sharding = model.embedding.embeddings.value.sharding
    return recorder.losses, model.get_weights(), optimizer_step(model), sharding


parallel_losses, parallel_weights, parallel_steps, sharding = run()
distribution = keras.distribution.distribution()
keras.distribution.set_distribution(None)
single_losses, single_weights, single_steps, _ = run()
print(json.dumps({
    "distribution": type(distribution).__name__, "replicas": placement.replicas,
    "devices": [str(d) for d in jax.devices()],
    "weights_on_devices": len(sharding.device_set),
    "batch_sizes": [int(b[1].shape[0]) for b in batches],
    "parallel_losses": parallel_losses, "single_losses": single_losses,
    "steps": [parallel_steps, single_steps],
    "max_weight_diff": max(float(np.abs(a - b).max())
                           for a, b in zip(parallel_weights, single_weights)),
}))

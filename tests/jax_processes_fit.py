"""A few `fit` steps of the Transformer on fixed batches: process I of 2 JAX processes (one CPU
device each, its half of every batch) or one process with 2 host devices (whole batches).

Run as a script by tests/test_jax_processes.py:
    python tests/jax_processes_fit.py single OUT.npz
    python tests/jax_processes_fit.py process COORDINATOR I OUT.npz
Writes the trained weights to OUT.npz.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"

from tfformer.train.devices import Processes, place  # noqa: E402

mode = sys.argv[1]
if mode == "single":
    placement, out, part = place("jax", 2), sys.argv[2], slice(None)
else:
    index = int(sys.argv[3])
    placement = place("jax", None, Processes(sys.argv[2], 2, index, timeout=60))
    out, part = sys.argv[4], slice(4 * index, 4 * index + 4)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfformer import Transformer, TransformerConfig, compile_transformer  # noqa: E402

config = TransformerConfig(vocab_size=40, d_model=16, num_heads=2, d_ff=32,
                           num_encoder_layers=1, num_decoder_layers=1, max_length=16,
                           dropout=0.0)
keras.utils.set_random_seed(0)  # every process draws the same initial weights
model = Transformer(config)
model.build()
rng = np.random.default_rng(0)
model.set_weights([rng.normal(0, 0.1, w.shape).astype(w.dtype) for w in model.get_weights()])
compile_transformer(model, optimizer=keras.optimizers.SGD(learning_rate=0.5))
data = np.random.default_rng(1)
batches = [((data.integers(4, 40, (8, 8)).astype("int32"),
             data.integers(4, 40, (8, 8)).astype("int32")),
            data.integers(4, 40, (8, 8)).astype("int32")) for _ in range(3)]


def feed():
    for (source, target_in), target_out in batches:
        yield (source[part], target_in[part]), target_out[part]


model.fit(feed(), steps_per_epoch=3, epochs=1, verbose=0)
np.savez(out, *model.get_weights(), replicas=placement.replicas, chief=placement.chief,
         workers=placement.num_workers)

"""Training throughput of the paper's base model: tfformer vs the same model built from KerasHub
layers, in one run, on one CPU thread, with 64 x 32-token batches. JSON on stdout.

    .venv/bin/pip install -e '.[bench]'          # keras-hub
    .venv/bin/python benchmarks/train_speed.py > train_speed.json

Both models: d_model 512, h 8, d_ff 2048, N 6 + 6, dropout 0.1, a 37000-token vocabulary, Adam,
sparse cross-entropy on logits, `model.fit` with Keras defaults (no XLA on CPU); tfformer also
with jit_compile=True. Throughput counts target tokens per second over the timed steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402  (TensorFlow runs no op before the thread settings in main)

BATCH, LENGTH, VOCAB = 64, 32, 37000


class StepTimer(keras.callbacks.Callback):
    """Records the wall time of every training batch."""

    def on_train_begin(self, logs=None):
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.start)


def keras_hub_transformer(vocab: int, d_model=512, heads=8, d_ff=2048, layers=6, dropout=0.1):
    """The base Transformer from KerasHub layers: tied embeddings, sinusoidal positions."""
    import keras_hub

    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    embedding = keras_hub.layers.ReversibleEmbedding(vocab, d_model)
    positions = keras_hub.layers.SinePositionEncoding()

    def embed(ids):
        x = embedding(ids) * (d_model ** 0.5)
        return keras.layers.Dropout(dropout)(x + positions(x))

    x = embed(source)
    for _ in range(layers):
        x = keras_hub.layers.TransformerEncoder(d_ff, heads, dropout=dropout)(x)
    y = embed(target)
    for _ in range(layers):
        y = keras_hub.layers.TransformerDecoder(d_ff, heads, dropout=dropout)(y, x)
    logits = embedding(y, reverse=True)
    return keras.Model([source, target], logits)


def measure(model, data, steps: int, warmup: int) -> dict:
    timer = StepTimer()
    model.fit(data, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[timer])
    timed = timer.times[warmup:]
    seconds = sum(timed) / len(timed)
    return {"seconds_per_step": round(seconds, 3),
            "target_tokens_per_second": round(BATCH * LENGTH / seconds, 1),
            "timed_steps": len(timed), "params": model.count_params()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-xla", action="store_true")
    args = parser.parse_args(argv)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import numpy as np

    from tfformer import Transformer, compile_transformer, get_preset

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    source = rng.integers(4, VOCAB, (BATCH, LENGTH)).astype("int32")
    target = rng.integers(4, VOCAB, (BATCH, LENGTH)).astype("int32")
    labels = rng.integers(4, VOCAB, (BATCH, LENGTH)).astype("int32")
    ours_data = tf.data.Dataset.from_tensors(((source, target), labels)).repeat()
    hub_data = tf.data.Dataset.from_tensors(((source, target), labels)).repeat()

    results = {"batch": BATCH, "length": LENGTH, "vocab": VOCAB, "threads": args.threads,
               "tensorflow": tf.__version__, "keras": keras.__version__}
    config = get_preset("base", vocab_size=VOCAB)
    ours = compile_transformer(Transformer(config), optimizer=keras.optimizers.Adam())
    results["tfformer"] = measure(ours, ours_data, args.steps, args.warmup)
    print(json.dumps({"tfformer": results["tfformer"]}), file=sys.stderr, flush=True)
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        results["keras_hub"] = "not installed: pip install -e '.[bench]'"
    else:
        hub = keras_hub_transformer(VOCAB)
        hub.compile(optimizer=keras.optimizers.Adam(),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        results["keras_hub"] = measure(hub, hub_data, args.steps, args.warmup)
        print(json.dumps({"keras_hub": results["keras_hub"]}), file=sys.stderr, flush=True)
        results["tfformer_vs_keras_hub"] = round(
            results["tfformer"]["target_tokens_per_second"]
            / results["keras_hub"]["target_tokens_per_second"], 3)
    if not args.skip_xla:
        xla = compile_transformer(Transformer(config), optimizer=keras.optimizers.Adam(),
                                  jit_compile=True)
        results["tfformer_xla"] = measure(xla, ours_data, args.steps, args.warmup)
        results["xla_vs_default"] = round(
            results["tfformer_xla"]["target_tokens_per_second"]
            / results["tfformer"]["target_tokens_per_second"], 3)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training throughput of the paper's base model: tfformer vs the same model built from KerasHub
layers, and tfformer in float32 vs bf16 (mixed precision), each against a matmul of its own dtype
timed in the same run. JSON on stdout.

    .venv/bin/pip install -e '.[bench]'          # keras-hub
    .venv/bin/python benchmarks/training/train_speed.py --threads 2 \
        > benchmarks/results/train_speed.json

Both models: d_model 512, h 8, d_ff 2048, N 6 + 6, dropout 0.1, a 37000-token vocabulary, Adam,
sparse cross-entropy on logits, `model.fit` with Keras defaults (no XLA on CPU); tfformer also
with jit_compile=True. Throughput counts target tokens per second over the timed steps.

Share of peak: the step's matmul FLOPs (3 x the forward pass's: the projections, feed-forward
layers, attention products and the output layer) per second, over the FLOP/s of a
[2048, 512] x [512, 2048] matmul of the same dtype (the feed-forward layer's shape at these
batches). bf16 only pays on CPUs with AVX512_BF16 or AMX; `cpu_flags` names them.
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


def measure(model, data, steps: int, warmup: int, flops_per_step: float | None = None,
            peak: float | None = None) -> dict:
    timer = StepTimer()
    model.fit(data, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[timer])
    timed = timer.times[warmup:]
    seconds = sum(timed) / len(timed)
    result = {"seconds_per_step": round(seconds, 3),
              "target_tokens_per_second": round(BATCH * LENGTH / seconds, 1),
              "timed_steps": len(timed), "params": model.count_params()}
    if flops_per_step and peak:
        result["gflops_per_second"] = round(flops_per_step / seconds / 1e9, 1)
        result["share_of_matmul_peak"] = round(flops_per_step / seconds / peak, 3)
    return result


def training_flops(d_model=512, d_ff=2048, layers=6, vocab=VOCAB) -> float:
    """Matmul FLOPs of one training step at BATCH x LENGTH (backward = 2 x forward)."""
    tokens, n = BATCH * LENGTH, LENGTH
    attention = 2 * 4 * d_model * d_model + 2 * 2 * n * d_model  # projections + QK^T, AV
    encoder = layers * (attention + 2 * 2 * d_model * d_ff)
    decoder = layers * (2 * attention + 2 * 2 * d_model * d_ff)
    output = 2 * d_model * vocab
    return 3.0 * tokens * (encoder + decoder + output)


def matmul_peak(dtype: str, reps: int = 20) -> float:
    """FLOP/s of a [2048, 512] x [512, 2048] matmul in `dtype` (best of `reps`)."""
    import tensorflow as tf

    a = tf.random.normal([BATCH * LENGTH, 512], dtype=tf.float32)
    b = tf.random.normal([512, 2048], dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y))
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * BATCH * LENGTH * 512 * 2048 / best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-xla", action="store_true")
    parser.add_argument("--skip-keras-hub", action="store_true")
    parser.add_argument("--precisions", default="fp32,bf16",
                        help="tfformer's precisions to time (fp32, bf16, fp16)")
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

    from tfformer.model import precision
    from tfformer.utils import cpu

    results = {"batch": BATCH, "length": LENGTH, "vocab": VOCAB, "threads": args.threads,
               "tensorflow": tf.__version__, "keras": keras.__version__,
               "cpu_flags": cpu.matmul_flags(),
               "command": " ".join(["python", *sys.argv])}
    config = get_preset("base", vocab_size=VOCAB)
    flops = training_flops()
    dtypes = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    precisions = args.precisions.split(",")
    peaks = {name: matmul_peak(dtypes[name]) for name in precisions}
    results["matmul_peak_gflops"] = {name: round(peak / 1e9, 1) for name, peak in peaks.items()}
    results["training_gflops_per_step"] = round(flops / 1e9, 1)
    # Keras' default compile, then (unless --skip-xla) jit_compile=True, for each precision.
    variants = [("", {})] + ([] if args.skip_xla else [("_xla", {"jit_compile": True})])
    for name in precisions:
        for suffix, compile_kwargs in variants:
            key = ("tfformer" if name == "fp32" else f"tfformer_{name}") + suffix
            with precision.policy(None if name == "fp32" else name):
                model = compile_transformer(Transformer(config),
                                            optimizer=keras.optimizers.Adam(), **compile_kwargs)
            results[key] = measure(model, ours_data, args.steps, args.warmup, flops, peaks[name])
            print(json.dumps({key: results[key]}), file=sys.stderr, flush=True)
    if "tfformer_xla" in results:
        results["xla_vs_default"] = round(
            results["tfformer_xla"]["target_tokens_per_second"]
            / results["tfformer"]["target_tokens_per_second"], 3)
    for name in ("bf16", "fp16"):
        if f"tfformer_{name}" in results and "tfformer" in results:
            results[f"{name}_vs_fp32"] = round(
                results[f"tfformer_{name}"]["target_tokens_per_second"]
                / results["tfformer"]["target_tokens_per_second"], 3)
    if args.skip_keras_hub:
        results["keras_hub"] = "skipped (--skip-keras-hub)"
        print(json.dumps(results, indent=1))
        return 0
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
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Beam search off TensorFlow: the compiled `keras.ops` search under JAX
(`tfformer.decode.keras_search`) against TensorFlow's graph search (`tfformer.decode.search`,
what the SavedModel runs) on the same weights and sentences, in one run. JSON on stdout.

    .venv/bin/python benchmarks/decoding/keras_search.py > benchmarks/results/keras_search.json
    # quick:
    .venv/bin/python benchmarks/decoding/keras_search.py --preset tiny --sentences 8 --repeats 1

Each contender runs in its own process (one Keras backend each): a random model of the preset
(dropout off), its weights written by the first and read by the others, beam 4 with the length
penalty 0.6 over `--sentences` random sources of `--length` tokens. It reports the first call
(tracing and compiling included) and the median of `--repeats` later calls, and whether the
contenders' tokens are the same: the share of hypotheses (`hypotheses_equal_to_tensorflow`, in
rank order) and of best ones (`best_equal_to_tensorflow`) equal id for id. A random model's
candidates can be nearly tied, so a last-bit difference between the backends' float arithmetic
may reorder a few of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTENDERS = {"tensorflow_graph": "tensorflow", "jax_compiled": "jax"}


def child(args) -> int:
    os.environ["KERAS_BACKEND"] = CONTENDERS[args.child]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    from tfformer.config import get_preset
    from tfformer.model.transformer import Transformer
    from tfformer.special_tokens import EOS_ID

    keras.utils.set_random_seed(0)
    model = Transformer(get_preset(args.preset, dropout=0.0, vocab_size=args.vocab_size))
    model.build()
    if os.path.exists(args.weights):
        model.load_weights(args.weights)
    else:
        model.save_weights(args.weights)
    sources = np.random.default_rng(0).integers(4, args.vocab_size, size=(
        args.sentences, args.length)).astype("int32")
    sources[:, -1] = EOS_ID
    if args.child == "tensorflow_graph":
        import tensorflow as tf

        from tfformer.decode.search import beam_search

        graph = tf.function(lambda ids: beam_search(model, ids, 4, 0.6, args.extra, n_best=4),
                            input_signature=[tf.TensorSpec([None, None], tf.int32)])

        def search():
            result = graph(sources)
            return result.tokens.numpy(), result.scores.numpy()
    else:
        from tfformer.decode.keras_search import beam_search

        def search():
            return beam_search(model, sources, 4, 0.6, args.extra, n_best=4)

    started = time.perf_counter()
    tokens, scores = search()
    first = time.perf_counter() - started
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        search()
        times.append(time.perf_counter() - started)
    np.save(args.tokens, tokens)
    print(json.dumps({"first_call_s": round(first, 3),
                      "median_s": round(statistics.median(times), 4),
                      "output_positions": int(tokens.shape[-1])}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--extra", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=sorted(CONTENDERS), help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    import numpy as np

    from tfformer.utils.cpu import matmul_flags

    rows = {}
    with tempfile.TemporaryDirectory() as work:
        weights = os.path.join(work, "model.weights.h5")
        for name in CONTENDERS:
            tokens = os.path.join(work, f"{name}.npy")
            result = subprocess.run(
                [sys.executable, __file__, "--child", name, "--weights", weights, "--tokens",
                 tokens, *sys.argv[1:]], capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": ROOT})
            if result.returncode != 0:
                sys.stderr.write(result.stderr[-3000:])
                return 1
            rows[name] = json.loads(result.stdout.strip().splitlines()[-1])
            rows[name]["tokens"] = np.load(tokens)
    reference = rows["tensorflow_graph"].pop("tokens")
    pad = lambda x, width: np.pad(x, [(0, 0), (0, 0), (0, width - x.shape[-1])])  # noqa: E731
    for name, row in rows.items():
        if name != "tensorflow_graph":
            tokens = row.pop("tokens")
            width = max(tokens.shape[-1], reference.shape[-1])
            same = (pad(tokens, width) == pad(reference, width)).all(axis=-1)  # [sentence, rank]
            row["hypotheses_equal_to_tensorflow"] = round(float(same.mean()), 4)
            row["best_equal_to_tensorflow"] = round(float(same[:, 0].mean()), 4)
            row["median_over_tensorflow"] = round(
                row["median_s"] / rows["tensorflow_graph"]["median_s"], 3)
    print(json.dumps({"preset": args.preset, "vocab_size": args.vocab_size,
                      "sentences": args.sentences, "source_length": args.length,
                      "max_output_extra": args.extra, "beam_size": 4, "length_penalty": 0.6,
                      "repeats": args.repeats, "cpu": platform.processor() or platform.machine(),
                      "cpu_flags": matmul_flags(), "contenders": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

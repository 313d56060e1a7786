"""A/B speed of two source trees of tfformer on the TensorFlow backend, in one run. JSON out.

    git worktree add /tmp/base HEAD~1
    .venv/bin/python tools/compare_trees.py /tmp/base . --rounds 3 > ab.json

Each round runs one process per tree, alternately (A B A B ...), so that drift in the machine's
load hits both alike. A process times, on one model with random weights (EOS never wins, so
every hypothesis is 64 tokens long): cached greedy and beam-4 decoding at batch 1 and 32 (tiny
and base), and `model.fit` train steps on fixed batches (tiny 64x32, base 16x32). Reported: the
median over rounds of each tree's medians, and B/A time ratios (below 1: B is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

OUTPUT_TOKENS = 64


def probe(reps: int) -> dict:
    """Times the current tree (on sys.path) in this process; returns {case: median ms}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfformer.config import get_preset
    from tfformer.decode.search import beam_search, greedy_search
    from tfformer.model.compile_transformer import compile_transformer
    from tfformer.model.transformer import Transformer
    from tfformer.special_tokens import EOS_ID

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    times = {}

    def median_ms(function):
        function()
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            function()
            samples.append(1000 * (time.perf_counter() - start))
        return round(statistics.median(samples), 2)

    for preset, vocab in (("tiny", 4000), ("base", 4000)):
        model = Transformer(get_preset(preset, vocab_size=vocab, dropout=0.0))
        model.build()
        embeddings = model.embedding.embeddings
        embeddings.assign(tf.tensor_scatter_nd_update(
            embeddings, [[EOS_ID]], tf.zeros([1, embeddings.shape[1]])))
        for batch in (1, 32):
            source = tf.constant(rng.integers(4, vocab, (batch, 14)), tf.int32)
            extra = OUTPUT_TOKENS - 14
            greedy = tf.function(lambda s: greedy_search(model, s, extra).tokens)
            beam = tf.function(lambda s: beam_search(model, s, 4, 0.6, extra).tokens)
            times[f"{preset}/greedy/b{batch}"] = median_ms(lambda: greedy(source).numpy())
            if preset == "tiny" or batch == 1:
                times[f"{preset}/beam4/b{batch}"] = median_ms(lambda: beam(source).numpy())
        rows = 64 if preset == "tiny" else 16
        ids = rng.integers(4, vocab, (3, rows, 32)).astype("int32")
        model = compile_transformer(Transformer(get_preset(preset, vocab_size=vocab)),
                                    optimizer=keras.optimizers.Adam())
        data = tf.data.Dataset.from_tensors(((ids[0], ids[1]), ids[2])).repeat()
        model.fit(data, steps_per_epoch=2, verbose=0)  # trace and warm up
        steps = 8 if preset == "tiny" else 3
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=steps, verbose=0)
        times[f"{preset}/train_step"] = round(1000 * (time.perf_counter() - start) / steps, 2)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree_a")
    parser.add_argument("tree_b")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # child: time this tree
    args = parser.parse_args(argv)
    if args.probe:
        sys.path.insert(0, os.path.abspath(args.probe))
        print(json.dumps(probe(args.reps)))
        return 0
    runs = {"a": [], "b": []}
    for _ in range(args.rounds):
        for key, tree in (("a", args.tree_a), ("b", args.tree_b)):
            out = subprocess.run([sys.executable, __file__, args.tree_a, args.tree_b,
                                  "--reps", str(args.reps), "--probe", tree],
                                 capture_output=True, text=True, check=True)
            runs[key].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(key, runs[key][-1], file=sys.stderr, flush=True)
    cases = list(runs["a"][0])
    medians = {key: {case: statistics.median(run[case] for run in runs[key]) for case in cases}
               for key in runs}
    from tfformer.utils.cpu import matmul_flags

    print(json.dumps({
        "trees": {"a": args.tree_a, "b": args.tree_b}, "rounds": args.rounds,
        "threads": 1, "cpu_flags": matmul_flags(),
        # TensorFlow's default: oneDNN on CPUs with AVX-512 VNNI/BF16 or AMX, off on AVX2 ones.
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "median_ms": medians,
        "b_over_a": {case: round(medians["b"][case] / medians["a"][case], 3) for case in cases},
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

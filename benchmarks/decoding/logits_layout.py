"""The pre-softmax projection's layout in the searches: E^T transposed once per call (what the
searches do, `SharedEmbedding.projection`) against the tied table read transposed by every
step's MatMul(transpose_b), in one process, calls interleaved. JSON on stdout.

    .venv/bin/python benchmarks/decoding/logits_layout.py > benchmarks/results/logits_layout.json

Each mode runs in a child process: TensorFlow's default (oneDNN on CPUs with AVX-512 VNNI/BF16
or AMX, off on AVX2-only ones) and `TF_ENABLE_ONEDNN_OPTS=0`, the Eigen kernels that AVX2-only
CPUs run by default. Models as `tools/compare_trees.py` builds them: random weights, EOS never
wins, so every hypothesis is 64 tokens long; each case checks that both layouts give the same
tokens.
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
SOURCE_TOKENS = 14


def measure(reps: int) -> dict:
    """Times every case in this process; returns {case: {...}}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfformer.config import get_preset
    from tfformer.decode.search import beam_search, greedy_search
    from tfformer.model.transformer import Transformer
    from tfformer.special_tokens import EOS_ID

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    cases = {}
    extra = OUTPUT_TOKENS - SOURCE_TOKENS
    for preset in ("tiny", "base"):
        model = Transformer(get_preset(preset, vocab_size=4000, dropout=0.0))
        model.build()
        table = model.embedding.embeddings
        table.assign(tf.tensor_scatter_nd_update(table, [[EOS_ID]], tf.zeros([1, table.shape[1]])))
        transposed_once = model.embedding.projection
        for search, run in (("greedy", lambda s: greedy_search(model, s, extra).tokens),
                            ("beam4", lambda s: beam_search(model, s, 4, 0.6, extra).tokens)):
            # Traced here, once each: without the projection (every step reads the table
            # transposed, as before) and with it.
            spec = [tf.TensorSpec([None, None], tf.int32)]
            model.embedding.projection = lambda: None
            per_step = tf.function(run, input_signature=spec)
            per_step.get_concrete_function()
            model.embedding.projection = transposed_once
            once = tf.function(run, input_signature=spec)
            once.get_concrete_function()
            for batch in (1, 32):
                source = tf.constant(rng.integers(4, 4000, (batch, SOURCE_TOKENS)), tf.int32)
                same = bool((per_step(source).numpy() == once(source).numpy()).all())
                times = {"per_step": [], "once": []}
                for _ in range(reps):
                    for name, function in (("per_step", per_step), ("once", once)):
                        start = time.perf_counter()
                        function(source).numpy()
                        times[name].append(1000 * (time.perf_counter() - start))
                per_step_ms, once_ms = (round(statistics.median(times[n]), 2)
                                        for n in ("per_step", "once"))
                cases[f"{preset}/{search}/b{batch}"] = {
                    "transposed_each_step_ms": per_step_ms, "transposed_once_ms": once_ms,
                    "once_over_each_step": round(once_ms / per_step_ms, 3),
                    "same_tokens": same}
                print(preset, search, batch, cases[f"{preset}/{search}/b{batch}"],
                      file=sys.stderr, flush=True)
    return cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.reps)))
        return 0
    from tfformer.utils.cpu import matmul_flags

    modes = {}
    for mode, value in (("default", None), ("onednn_off", "0")):
        env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
        if value is not None:
            env["TF_ENABLE_ONEDNN_OPTS"] = value
        out = subprocess.run([sys.executable, __file__, "--child", "--reps", str(args.reps)],
                             env=env, capture_output=True, text=True, check=True)
        modes[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps({"output_tokens": OUTPUT_TOKENS, "vocab_size": 4000, "cpu_count":
                      os.cpu_count(), "cpu_flags": matmul_flags(), "reps": args.reps,
                      "modes": modes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

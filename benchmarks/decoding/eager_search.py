"""A search called from Python (eagerly), as the README's Keras example calls `beam_search`: run
as one graph traced once per model and options (what `tfformer.decode.search` does), against
its tf.while_loop run op by op through Keras' eager layer calls (what it did before, and what
`tf.config.run_functions_eagerly(True)` still gives). One process, the modes in turn. JSON on
stdout.

    .venv/bin/python benchmarks/decoding/eager_search.py > benchmarks/results/eager_search.json

The tiny preset with random weights whose EOS never wins, so every hypothesis is 64 tokens long;
each case checks that both modes give the same tokens. CPU seconds are the process's, so they
count TensorFlow's threads too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

OUTPUT_TOKENS = 64
SENTENCE = "Los tres perros rojos comen manzanas verdes debajo de la mesa."


def timed(call) -> tuple[float, float, object]:
    """(wall s, CPU s, result) of one call, its result fetched to the host."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    result.tokens.numpy()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="calls timed after the first")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfformer.config import get_preset
    from tfformer.decode.search import beam_search, greedy_search
    from tfformer.model.transformer import Transformer
    from tfformer.special_tokens import EOS_ID
    from tfformer.utils.cpu import matmul_flags

    keras.utils.set_random_seed(0)
    model = Transformer(get_preset("tiny", vocab_size=4000, dropout=0.0))
    model.build()
    table = model.embedding.embeddings
    table.assign(tf.tensor_scatter_nd_update(table, [[EOS_ID]], tf.zeros([1, table.shape[1]])))
    source = np.random.default_rng(0).integers(4, 4000, size=14).astype("int32")
    source[-1] = EOS_ID
    extra = OUTPUT_TOKENS - len(source)
    searches = {"greedy": lambda ids: greedy_search(model, ids, extra),
                "beam4": lambda ids: beam_search(model, ids, 4, 0.6, extra)}
    cases = []
    for name, search in searches.items():
        for batch in args.batches:
            ids = tf.constant(np.tile(source, (batch, 1)))
            case = {"search": name, "batch": batch}
            tokens = {}
            for mode, eager in (("graph", False), ("op_by_op", True)):
                tf.config.run_functions_eagerly(eager)
                try:
                    first_wall, first_cpu, result = timed(lambda: search(ids))
                    later = [timed(lambda: search(ids)) for _ in range(args.reps)]
                finally:
                    tf.config.run_functions_eagerly(False)
                tokens[mode] = result.tokens.numpy()
                case[mode] = {"first_call_s": round(first_wall, 3),
                              "first_call_cpu_s": round(first_cpu, 3),
                              "median_later_call_ms": round(
                                  statistics.median(w for w, _, _ in later) * 1000, 2)}
            assert tokens["graph"].shape[-1] == OUTPUT_TOKENS, tokens["graph"].shape
            case["same_tokens"] = bool(np.array_equal(tokens["graph"], tokens["op_by_op"]))
            case["op_by_op_over_graph"] = {
                "first_call": round(case["op_by_op"]["first_call_s"]
                                    / case["graph"]["first_call_s"], 2),
                "later_calls": round(case["op_by_op"]["median_later_call_ms"]
                                     / case["graph"]["median_later_call_ms"], 1)}
            cases.append(case)
            print(json.dumps(case), file=sys.stderr, flush=True)
    print(json.dumps({"preset": "tiny", "vocab_size": 4000, "output_tokens": OUTPUT_TOKENS,
                      "tensorflow": tf.__version__, "cpu_count": os.cpu_count(),
                      "cpu_flags": matmul_flags(), "reps": args.reps,
                      "command": "benchmarks/decoding/eager_search.py", "cases": cases}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

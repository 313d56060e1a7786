"""What one op costs inside a decoding loop: TensorFlow's executor (a chain of cheap element-wise
ops) against a small matmul + bias (the kernel call that a decoding step of the tiny model makes
16 times, at one row per sentence and beam). JSON on stdout.

    .venv/bin/python benchmarks/decoding/op_cost.py > op_cost.json
    TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python benchmarks/decoding/op_cost.py > op_cost_eigen.json

Each form runs as a `tf.while_loop` of STEPS steps whose body chains k ops, in one tf.function
(as the SavedModel's search runs), for several k: the slope of the median call time over k is the
cost of one op, and the intercept per step the loop's own bookkeeping. The matmul's weights are
orthogonal, so the values neither vanish nor grow along the chain.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEPS = 64  # the output tokens of `benchmarks/decoding/decode.py`


def chain_time(form: str, rows: int, width: int, k: int, reps: int) -> float:
    """Median ms of one call: STEPS steps of k chained `form` ops on [rows, width]."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    weight = tf.constant(np.linalg.qr(rng.normal(size=(width, width)))[0], tf.float32)
    bias = tf.zeros([width])

    def op(x):
        if form == "elementwise":
            return tf.sin(x)
        return tf.nn.bias_add(tf.matmul(x, weight), bias)

    @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32)])
    def run(x):
        def body(t, x):
            for _ in range(k):
                x = op(x)
            return t + 1, x
        return tf.while_loop(lambda t, x: t < STEPS, body, (tf.constant(0), x))[1]

    x = tf.random.normal([rows, width], seed=1)
    for _ in range(3):  # trace, optimize, warm up
        run(x)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run(x).numpy()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def fit(ks: list[int], ms: list[float]) -> tuple[float, float]:
    """Least-squares line ms = a + b k: (b per op, a per step), both in microseconds."""
    mean_k, mean_ms = statistics.fmean(ks), statistics.fmean(ms)
    slope = sum((k - mean_k) * (m - mean_ms) for k, m in zip(ks, ms)) / \
        sum((k - mean_k) ** 2 for k in ks)
    intercept = mean_ms - slope * mean_k
    return 1000 * slope / STEPS, 1000 * intercept / STEPS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 4],
                        help="rows of each op's input (sentences x beams)")
    parser.add_argument("--width", type=int, default=128, help="d_model of the tiny preset")
    parser.add_argument("--ks", nargs="+", type=int, default=[16, 64, 256],
                        help="ops chained per step")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    if len(set(args.ks)) < 2:
        parser.error("--ks needs at least two different counts to fit a line")

    from tensorflow.python.util import _pywrap_util_port

    from tfformer.utils.cpu import matmul_flags

    report = {"steps": STEPS, "width": args.width, "cpu_flags": matmul_flags(),
              "cpu_count": os.cpu_count(),
              "onednn": bool(_pywrap_util_port.IsMklEnabled()),
              **{name: os.environ.get(name) for name in (
                  "TF_ENABLE_ONEDNN_OPTS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")},
              "rows": []}
    for form in ("elementwise", "matmul_bias"):
        for rows in args.rows:
            ms = [chain_time(form, rows, args.width, k, args.reps) for k in args.ks]
            per_op, per_step = fit(args.ks, ms)
            row = {"form": form, "rows": rows, "ops_per_step": args.ks,
                   "median_ms": [round(m, 3) for m in ms],
                   "us_per_op": round(per_op, 3), "us_per_step_besides": round(per_step, 2)}
            report["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training step of the tiny preset with TensorFlow's oneDNN CPU kernels on and off, in one run.

    .venv/bin/python benchmarks/training/onednn.py > benchmarks/results/onednn.json

TensorFlow turns oneDNN on by itself only on CPUs with AVX-512-class features. On an AVX2-only
CPU it is off unless TF_ENABLE_ONEDNN_OPTS=1 is set before TensorFlow is imported, which
`tfformer-train` does unless the variable is set already (`TF_ENABLE_ONEDNN_OPTS=0` keeps Eigen's
kernels). Each setting runs in its own process, alternating, on the same random 64 x 32-token
batch (the Bible recipe's 2048-token budget), with the full compiled objective (label-smoothed
loss, accuracy, perplexity, Adam).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def measure(steps: int) -> dict:
    import keras
    import numpy as np
    from tensorflow.python.util import _pywrap_util_port

    from tfformer.config import get_preset
    from tfformer.model.compile_transformer import compile_transformer
    from tfformer.model.schedule import paper_optimizer
    from tfformer.model.transformer import Transformer

    batch, length, vocab = 64, 32, 8000
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    source = rng.integers(4, vocab, (batch, length)).astype("int32")
    target = rng.integers(4, vocab, (batch, length)).astype("int32")
    config = get_preset("tiny", vocab_size=vocab)
    model = Transformer(config)
    model.build()
    compile_transformer(model, paper_optimizer(config.d_model, 400))
    for _ in range(2):  # trace and warm up
        model.train_on_batch((source, target), target)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        model.train_on_batch((source, target), target)
        times.append(time.perf_counter() - started)
    return {"onednn": bool(_pywrap_util_port.IsMklEnabled()),
            "median_seconds_per_step": round(statistics.median(times), 4),
            "target_tokens_per_second": round(batch * length / statistics.median(times))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="processes per setting")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        sys.path.insert(0, ROOT)
        print(json.dumps(measure(args.steps)))
        return 0
    runs = {"on": [], "off": []}
    for _ in range(args.rounds):
        for setting, value in (("on", "1"), ("off", "0")):
            result = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--measure", "--steps",
                 str(args.steps)], capture_output=True, text=True, timeout=900,
                env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": value, "TF_CPP_MIN_LOG_LEVEL": "2"})
            if result.returncode:
                raise RuntimeError(result.stderr[-3000:])
            runs[setting].append(json.loads(result.stdout.strip().splitlines()[-1]))
            print(setting, runs[setting][-1], file=sys.stderr, flush=True)
    median = {setting: statistics.median(r["median_seconds_per_step"] for r in results)
              for setting, results in runs.items()}
    import tensorflow as tf

    print(json.dumps({
        "model": "tiny, 64 x 32-token batch, vocab 8000", "machine": f"{os.cpu_count()} CPU cores",
        "tensorflow": tf.__version__, "runs": runs,
        "median_seconds_per_step": median,
        "onednn_speedup": round(median["off"] / median["on"], 2)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The first request after a version serves, with and without the export's warmup requests.

    .venv/bin/python benchmarks/serving/serve_warmup.py > benchmarks/results/serve_warmup.json

Exports a run (default: the tiny preset with random weights and a tokenizer of the built-in
corpus) with `run.export` (beam 4, length penalty 0.6), then, for each
mode, starts `tfformer-serve` in a fresh process on a copy of the export (`no_warmup`: without
`assets.extra/`), waits until it listens, and times over one open gRPC channel the first
`serving_default` request and the `--repeats` after it (`tfformer.serving.client`). Reports each
mode's start-up seconds (process start to listening: loading, and the warmup replay), the first
request's milliseconds, the median of the next ones, and their ratio (target, issue 32: at most
2x with warmup). One run, one machine; its CPU flags are named.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SENTENCES = ["Los tres perros rojos comen manzanas verdes.", "Una hermana visita el puente azul."]


def random_run(directory: str) -> str:
    """A run dir of the tiny preset with random weights (seeded) and a built-in tokenizer."""
    import keras

    from tfformer import Transformer, get_preset
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer

    keras.utils.set_random_seed(0)
    tokenizer = Tokenizer.train([s for pair in builtin_pairs("train", 2000) for s in pair], 2000)
    tokenizer.save(os.path.join(directory, "tokenizer.model"))
    model = Transformer(get_preset("tiny", vocab_size=tokenizer.vocab_size))
    model.build()
    model.save(os.path.join(directory, "model.keras"))
    return directory


def serve_and_time(model_path: str, repeats: int) -> dict:
    """Starts tfformer-serve on `model_path`; times its start-up and the first requests."""
    import grpc

    from tfformer.serving import client

    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tfformer.cli.serve", "--model-base-path", model_path,
         "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": ROOT})
    try:
        line = process.stdout.readline()
        found = re.search(r"listening on (\S+)", line)
        if not found:
            raise RuntimeError(f"tfformer-serve did not start: {line!r}")
        start_up = time.monotonic() - started
        with grpc.insecure_channel(found.group(1)) as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
            times = []
            for _ in range(1 + repeats):
                begin = time.perf_counter()
                client.translate(SENTENCES, channel=channel, timeout=600)
                times.append(1000 * (time.perf_counter() - begin))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    median = statistics.median(times[1:])
    return {"start_up_seconds": round(start_up, 2), "first_request_ms": round(times[0], 1),
            "median_next_ms": round(median, 1), "first_vs_median": round(times[0] / median, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="a run dir to export (default: tiny, random weights)")
    parser.add_argument("--repeats", type=int, default=10, help="requests after the first")
    args = parser.parse_args(argv)

    from tfformer import run
    from tfformer.export.warmup import WARMUP_FILE
    from tfformer.utils.cpu import matmul_flags

    report = {"cpu_flags": matmul_flags(), "cpu_count": os.cpu_count(),
              "sentences": len(SENTENCES), "repeats": args.repeats,
              "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
              "modes": {}}
    with tempfile.TemporaryDirectory() as work:
        run_dir = args.run or random_run(tempfile.mkdtemp(dir=work))
        report["run"] = args.run or "tiny preset, random weights"
        exported = run.export(run_dir, model_base_path=os.path.join(work, "export"))
        for mode in ("no_warmup", "warmup"):
            version = os.path.join(work, mode, "tfformer", "1")
            shutil.copytree(exported.export_dir, version)
            if mode == "no_warmup":
                shutil.rmtree(os.path.join(version, os.path.dirname(WARMUP_FILE)))
            report["modes"][mode] = serve_and_time(os.path.dirname(version), args.repeats)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The whole run on one GPU where only JAX is installed: `tfformer-train --backend jax` on a
prepared corpus for a fixed time, dev BLEU with beam search after every epoch, against the
synthetic benchmark (`benchmarks/training/train_gpu.py`) of the same preset and batch shape in
the same call.

    # Here (TensorFlow installed): the Bible corpus prepared once (~5 MB), the wheels fetched.
    BIBLE=../shared/data/bible-es-en
    .venv/bin/tfformer-prepare --data tsv:$BIBLE/train.tsv,$BIBLE/dev.tsv --out data/bible \
        --vocab-size 8000
    bash benchmarks/training/gpu_wheels.sh
    # The GPU machine (data/ and .whl/ carried; no TensorFlow, no Keras, no network):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && \
        python3 benchmarks/training/train_gpu_e2e.py --store data/bible \
            --out $OUT/train_gpu_e2e.json
    # CPU, tiny (what tests/test_train_gpu_e2e.py runs)
    .venv/bin/python benchmarks/training/train_gpu_e2e.py --store STORE --preset tiny \
        --minutes 0.5 ...

The run: base preset, bf16 mixed precision, packed rows (`--pack-length`, one shape: one
compilation), `--batch-tokens`, `--minutes` of wall time (`--max-minutes`: start-up and epoch
ends included), an epoch every `--steps-per-epoch` updates with dev BLEU on `--dev-sentences`
sentences by beam search (`--dev-beam-size 4`, the `keras.ops` search). Then, in a child of its
own, the synthetic benchmark's keras-jax contender on random ids of the run's batch shape
([rows, pack_length]) gives the pipelined step time of the same model and shape.

The JSON holds: the run's command; per epoch its steps, training seconds, step time and target
tokens/s (the run's LogThroughput lines), dev BLEU and the seconds since the run's start;
compilations of the train step; the device's peak memory; the synthetic step and tokens/s; and
the issue's targets: real tokens/s >= 80% of the synthetic figure, the fit step within 3% of the
pipelined one, dev BLEU >= 40 within 7 minutes (the time to the first epoch reaching 30 and 35
BLEU is reported too).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: common
from common import logger  # noqa: E402

log = logger("train_gpu_e2e")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")



def seconds_of(line: str) -> float | None:
    """The time of a log line (LOG_FORMAT's asctime), in seconds since the epoch."""
    found = LOG_TIME.match(line)
    if not found:
        return None
    stamp = time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S"))
    return stamp + int(found.group(2)) / 1000


def parse_run_log(text: str, started: float) -> dict:
    """Per epoch: throughput, dev BLEU and its time since `started`; and the compilations."""
    epochs: dict[int, dict] = {}
    compiled = None
    for line in text.splitlines():
        when = seconds_of(line)
        if (found := re.search(r"epoch (\d+): throughput (\{.*\})", line)):
            epochs.setdefault(int(found.group(1)), {}).update(json.loads(found.group(2)))
        elif (found := re.search(r"epoch (\d+): dev BLEU ([\d.]+)", line)):
            epochs.setdefault(int(found.group(1)), {}).update(
                dev_bleu=float(found.group(2)),
                seconds=round(when - started, 1) if when is not None else None)
        elif (found := re.search(r"compiled: train_step (\d+), test_step (\d+)", line)):
            compiled = {"train_step": int(found.group(1)), "test_step": int(found.group(2))}
    return {"epochs": [{"epoch": e, **epochs[e]} for e in sorted(epochs)],
            "compilations": compiled}


def first_reaching(epochs: list[dict], bleu: float) -> float | None:
    """Seconds since the start to the first epoch whose dev BLEU reaches `bleu`."""
    return next((e["seconds"] for e in epochs if e.get("dev_bleu", -1) >= bleu), None)


def run_training(args, out: str) -> dict:
    rows = args.batch_tokens // args.pack_length
    command = [sys.executable, "-m", "tfformer.cli.train", "--backend", "jax",
               "--data", f"prepared:{args.store}", "--config", args.preset, "--out", out,
               "--mixed-precision", args.precision, "--pack-length", str(args.pack_length),
               "--batch-tokens", str(args.batch_tokens), "--max-minutes", str(args.minutes),
               "--steps", "100000000", "--steps-per-epoch", str(args.steps_per_epoch),
               "--dev-sentences", str(args.dev_sentences), "--dev-beam-size",
               str(args.beam_size), "--backup-every", str(args.steps_per_epoch),
               "--keep-checkpoints", "1", "--verbose", "0", *args.train_args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    log("training: " + " ".join(command[2:]))
    started = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.time() - started
    if done.returncode:
        raise RuntimeError(f"tfformer-train exited {done.returncode}:\n{done.stderr[-5000:]}")
    parsed = parse_run_log(done.stderr, started)
    epochs = parsed["epochs"]
    timed = [e for e in epochs[1:] if "step_seconds" in e] or epochs  # the first compiles
    steps = sum(e["steps"] for e in timed)
    step_seconds = sum(e["train_seconds"] for e in timed) / steps
    tokens = sum(e["target_tokens_per_second"] * e["train_seconds"] for e in timed)
    peaks = [e["peak_bytes"] for e in epochs if e.get("peak_bytes") is not None]
    return {"command": command[2:], "wall_seconds": round(wall, 1), "batch_shape": [rows,
            args.pack_length], "epochs": epochs, "compilations": parsed["compilations"],
            "step_seconds": round(step_seconds, 5),
            "target_tokens_per_second": round(tokens / sum(e["train_seconds"] for e in timed)),
            "peak_bytes": max(peaks) if peaks else None,
            "best_dev_bleu": max((e.get("dev_bleu", 0.0) for e in epochs), default=None),
            "seconds_to_30_bleu": first_reaching(epochs, 30.0),
            "seconds_to_35_bleu": first_reaching(epochs, 35.0),
            "seconds_to_40_bleu": first_reaching(epochs, 40.0)}


def run_synthetic(args, rows: int, vocab: int, out: str) -> dict:
    command = [sys.executable, os.path.join(HERE, "train_gpu.py"), "--preset", args.preset,
               "--contenders", "keras-jax", "--batch", str(rows), "--length",
               str(args.pack_length), "--vocab", str(vocab), "--out", out,
               *args.synthetic_args]
    log("synthetic: " + " ".join(command[1:]))
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"train_gpu.py exited {done.returncode}:\n{done.stderr[-5000:]}")
    contender = json.loads(done.stdout)["contenders"]["keras-jax"]
    return {"command": command[1:], "target_tokens_per_second": round(
        contender["target_tokens_per_s"]), "pipelined_step_seconds": round(
        contender["pipelined"]["step_time_s"], 5), "mfu": contender.get("mfu"),
        "device": contender.get("device")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a tfformer-prepare store")
    parser.add_argument("--preset", default="base", choices=("tiny", "base", "big"))
    parser.add_argument("--minutes", type=float, default=7.0)
    parser.add_argument("--pack-length", type=int, default=128)
    parser.add_argument("--batch-tokens", type=int, default=32768)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--steps-per-epoch", type=int, default=500)
    parser.add_argument("--dev-sentences", type=int, default=500)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--train-args", nargs=argparse.REMAINDER, default=[],
                        help="more tfformer-train flags (last)")
    parser.add_argument("--synthetic-args", type=lambda s: s.split(), default=[],
                        help="more train_gpu.py flags, space-separated in one argument")
    parser.add_argument("--out", default=None, help="the JSON's path (also on stdout)")
    args = parser.parse_args(argv)
    with open(os.path.join(args.store, "manifest.json")) as f:
        manifest = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        run = run_training(args, os.path.join(tmp, "run"))
        synthetic = run_synthetic(args, run["batch_shape"][0], manifest["vocab_size"],
                                  os.path.join(tmp, "synthetic.json"))
    real = run["target_tokens_per_second"]
    report = {
        "benchmark": "train_gpu_e2e", "store": {"path": args.store, "spec": manifest["spec"],
                                                "pairs": manifest["splits"]["train"]["pairs"]},
        "preset": args.preset, "run": run, "synthetic": synthetic,
        "real_over_synthetic_tokens": round(real / synthetic["target_tokens_per_second"], 3),
        "fit_over_pipelined_step": round(run["step_seconds"]
                                         / synthetic["pipelined_step_seconds"], 3)}
    report["targets"] = {
        "real_tokens_at_least_80_percent_of_synthetic": report["real_over_synthetic_tokens"]
        >= 0.8,
        "fit_step_within_3_percent_of_pipelined": report["fit_over_pipelined_step"] <= 1.03,
        "dev_bleu_40_within_7_minutes": (run["seconds_to_40_bleu"] or 1e9) <= 420}
    text = json.dumps(report, indent=1)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

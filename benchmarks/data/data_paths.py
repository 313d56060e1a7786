"""The TensorFlow backend's two data paths, one run after the other on the Bible recipe: the
tf.data stream of the text corpus against the NumPy loader of its prepared store
(`tfformer-prepare`, `--data prepared:DIR`), bucketed and packed. JSON on stdout.

    .venv/bin/python benchmarks/data/data_paths.py > benchmarks/results/data_paths.json
    .venv/bin/python benchmarks/data/data_paths.py --steps 30 --steps-per-epoch 10  # quick

Each run is `tfformer-train --recipe training/configs/bible-es-en-cpu.json` with a fixed number
of updates (`--steps`, no dev BLEU, no time limit), in a new run directory. It reports the target
tokens per second of the epochs after the first (`LogThroughput`: the training time of each
epoch, validation and checkpoints left out; the first epoch holds the start-up), and each
path's over tf.data's. The question it answers: can tf.data's bucketing and packing go, the
loader feeding TensorFlow too, at the same speed (within 5%)?
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIBLE = "tsv:../shared/data/bible-es-en/train.tsv,../shared/data/bible-es-en/dev.tsv"


def run(command: list[str]) -> str:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stderr


def train(out: str, data: str, args, extra: list[str]) -> dict:
    log = run([sys.executable, "-m", "tfformer.cli.train", "--recipe", args.recipe, "--data", data,
               "--out", out, "--steps", str(args.steps), "--steps-per-epoch",
               str(args.steps_per_epoch), "--dev-sentences", "0", "--max-minutes", "1000",
               "--verbose", "0", *extra])
    epochs = [json.loads(m) for m in re.findall(r"throughput (\{.*\})", log)]
    later = epochs[1:] or epochs
    return {"epochs": len(epochs),
            "target_tokens_per_second": round(statistics.mean(
                e["target_tokens_per_second"] for e in later)),
            "step_seconds": round(statistics.mean(e["step_seconds"] for e in later), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="training/configs/bible-es-en-cpu.json")
    parser.add_argument("--data", default=BIBLE)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--pack-length", type=int, default=128)
    args = parser.parse_args()
    from tfformer.utils.cpu import matmul_flags

    rows = {}
    with tempfile.TemporaryDirectory() as work:
        store = os.path.join(work, "store")
        run([sys.executable, "-m", "tfformer.cli.prepare", "--data", args.data, "--out", store,
             "--vocab-size", "8000"])
        for layout, extra in (("bucketed", []), ("packed", ["--pack-length",
                                                            str(args.pack_length)])):
            for path, data in (("tf_data", args.data), ("loader", f"prepared:{store}")):
                rows[f"{path}_{layout}"] = train(os.path.join(work, f"{path}_{layout}"), data,
                                                 args, extra)
    for layout in ("bucketed", "packed"):
        rows[f"loader_{layout}"]["over_tf_data"] = round(
            rows[f"loader_{layout}"]["target_tokens_per_second"]
            / rows[f"tf_data_{layout}"]["target_tokens_per_second"], 3)
    print(json.dumps({"recipe": args.recipe, "data": args.data, "steps": args.steps,
                      "steps_per_epoch": args.steps_per_epoch, "backend": "tensorflow",
                      "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
                      "cpu_flags": matmul_flags(), "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

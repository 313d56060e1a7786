"""`--jit auto` on the machine at hand: the Bible recipe's updates within its wall time with what
auto chose here and with the other choice, one run after the other. JSON on stdout.

    .venv/bin/python benchmarks/training/jit_auto.py > benchmarks/results/jit_auto.json
    .venv/bin/python benchmarks/training/jit_auto.py --minutes 0.5 --dev-sentences 5  # quick

Runs `tfformer-train --recipe training/configs/bible-es-en-cpu.json` as a user would (the recipe
asks for `"jit": "auto"`), each in a new run directory with `--max-minutes`:
- `auto`: the recipe as it is;
- `compiled_packed` (`--jit on --pack-length 128`, what auto picks where compiled steps pay) or
  `plain` (`--jit off`), whichever auto did not pick.
For each: the updates made, the target tokens trained (the batches' real target tokens), the
last validation loss and dev BLEU of the training callback, and the batch shapes; and auto's
choice and reason, from its log line.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.dirname(sys.executable)
OTHER = {"on": ("plain", ["--jit", "off"]),
         "off": ("compiled_packed", ["--jit", "on", "--pack-length", "128"])}


def train(out: str, args, extra: list[str]) -> dict:
    command = [os.path.join(BIN, "tfformer-train"), "--recipe", args.recipe, "--out", out,
               "--max-minutes", str(args.minutes), "--verbose", "2", *extra]
    if args.dev_sentences is not None:
        command += ["--dev-sentences", str(args.dev_sentences)]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    log = result.stderr
    rows = list(csv.DictReader(open(os.path.join(out, "metrics.csv"), encoding="utf-8")))
    last = rows[-1]
    throughput = [json.loads(m) for m in re.findall(r"throughput (\{.*\})", log)]
    shapes = re.findall(r"(\d+) batch shape\(s\) so far", log)
    chose = re.search(r"jit auto: (.*)", log)
    recorded = json.load(open(os.path.join(out, "train_args.json"), encoding="utf-8"))
    return {"command": " ".join(command[1:]), "jit": recorded["jit"],
            "pack_length": recorded["pack_length"], "seconds": round(seconds, 1),
            "updates": int(last["step"]),
            "target_tokens_per_second_mean": round(
                sum(t["target_tokens_per_second"] for t in throughput) / len(throughput))
            if throughput else None,
            "last_val_loss": float(last["val_loss"]) if last.get("val_loss") else None,
            "last_dev_bleu": float(last["dev_bleu"]) if last.get("dev_bleu") else None,
            "batch_shapes": int(shapes[-1]) if shapes else None,
            "auto_said": chose.group(1).strip() if chose else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="training/configs/bible-es-en-cpu.json")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--dev-sentences", type=int, default=None,
                        help="override the recipe's (quick runs)")
    args = parser.parse_args()
    from tfformer.utils.cpu import matmul_flags

    runs = {}
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "runs") if os.path.isdir(
            os.path.join(ROOT, "runs")) else None) as work:
        runs["auto"] = train(os.path.join(work, "auto"), args, [])
        name, flags = OTHER[runs["auto"]["jit"]]
        runs[name] = train(os.path.join(work, name), args, flags)
    other = runs[name]
    print(json.dumps({
        "recipe": args.recipe, "minutes": args.minutes,
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
        "cpu_flags": matmul_flags(), "auto_chose": runs["auto"]["auto_said"],
        "auto_updates_over_other": round(runs["auto"]["updates"] / other["updates"], 3),
        "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

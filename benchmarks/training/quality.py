"""Translation quality of a training recipe within a wall-time budget, measured end to end.

    .venv/bin/python benchmarks/training/quality.py --out runs/bible-quality \
        > benchmarks/results/quality.json

Runs, with the installed console scripts, exactly what a user would run:

1. `tfformer-train --recipe training/configs/bible-es-en-cpu.json --out OUT` (the recipe sets
   `max_minutes`: the run ends within that wall time, start-up, validation and dev BLEU
   included);
2. `tfformer-average OUT --last K` (the recipe's `average_last`);
3. `tfformer-evaluate` on the whole dev file: greedy and beam 4 on the last weights
   (`model.keras`), beam 4 on the average.

The JSON holds the three scores (sacreBLEU BLEU and chrF with signatures), the training curve
(dev BLEU of the training callback: greedy on the first `dev_sentences` dev pairs; validation
loss on the whole dev file) with the wall time of each epoch end, and the first 20 dev
translations of the best setting beside their sources and references.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
import common  # noqa: E402
from common import BIN, ROOT  # noqa: E402

log = common.logger("quality")
run = functools.partial(common.run, log=log)




def epoch_times(train_log: str, started: float) -> dict[int, float]:
    """Minutes since the start at which each epoch's dev BLEU was logged."""
    times = {}
    pattern = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ \S+: epoch (\d+): dev BLEU")
    for line in open(train_log, encoding="utf-8"):
        match = pattern.match(line)
        if match:
            at = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
            times[int(match.group(2))] = round((at - started) / 60, 2)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="training/configs/bible-es-en-cpu.json")
    parser.add_argument("--out", default="runs/bible-quality", help="the run directory (new)")
    parser.add_argument("--test", default=None,
                        help="the TSV to score (default: the recipe's DEV file)")
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from tfformer.train.settings import Recipe

    recipe = Recipe.load(os.path.join(ROOT, args.recipe))
    test = args.test or recipe.train.data.split(",")[1]
    out = args.out
    if os.path.exists(os.path.join(out, "config.json")):
        raise SystemExit(f"{out} already holds a run: a quality run starts from scratch")
    os.makedirs(out, exist_ok=True)
    started = time.time()
    run(os.path.join(BIN, "tfformer-train"), "--recipe", args.recipe, "--out", out,
        "--verbose", "0", log_to=os.path.join(out, "train.log"))
    train_minutes = round((time.time() - started) / 60, 2)
    log(f"trained in {train_minutes} min")
    minutes = epoch_times(os.path.join(out, "train.log"), started)
    curve = [{"epoch": int(row["epoch"]), "step": int(row["step"]),
              "minutes": minutes.get(int(row["epoch"])),
              "loss": round(float(row["loss"]), 4), "val_loss": round(float(row["val_loss"]), 4),
              "dev_bleu_greedy_callback": round(float(row["dev_bleu"]), 2)}
             for row in csv.DictReader(open(os.path.join(out, "metrics.csv")))]
    run(os.path.join(BIN, "tfformer-average"), out, "--last", str(recipe.average_last))
    settings = {"greedy, last weights": ["--beam-size", "1"],
                "beam 4, last weights": ["--beam-size", "4"],
                f"beam 4, average of the last {recipe.average_last}":
                    ["--beam-size", "4", "--average", str(recipe.average_last)]}
    scores = {}
    for name, flags in settings.items():
        directory = os.path.join(out, "eval-" + re.sub(r"[^a-z0-9]+", "-", name).strip("-"))
        started_eval = time.time()
        report = json.loads(run(os.path.join(BIN, "tfformer-evaluate"), out, "--data", test,
                                *flags, "--out", directory).strip().splitlines()[-1])
        scores[name] = {"bleu": report["bleu"], "chrf": report["chrf"],
                        "bleu_signature": report["bleu_signature"],
                        "chrf_signature": report["chrf_signature"],
                        "sentences": report["sentences"],
                        "seconds": round(time.time() - started_eval, 1), "hypotheses": directory}
        log(f"{name}: BLEU {report['bleu']}, chrF {report['chrf']}")
    best = max(scores, key=lambda name: scores[name]["bleu"])
    with open(test, encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for _, line in zip(range(args.samples), f)]
    with open(os.path.join(scores[best]["hypotheses"], "hypotheses.txt"), encoding="utf-8") as f:
        hypotheses = [line.rstrip("\n") for _, line in zip(range(args.samples), f)]
    import tensorflow as tf

    print(json.dumps({
        "recipe": args.recipe, "recipe_settings": json.load(open(os.path.join(ROOT, args.recipe))),
        "machine": f"{os.cpu_count()} CPU cores", "tensorflow": tf.__version__,
        "command": f"{sys.executable} benchmarks/training/quality.py --out {out}",
        "train_command": f"tfformer-train --recipe {args.recipe} --out {out}",
        "train_wall_minutes": train_minutes, "final_step": curve[-1]["step"] if curve else 0,
        "test_set": test, "scores": scores, "best": best, "curve": curve,
        "samples": [{"source": s, "hypothesis": h, "reference": r}
                    for (s, r), h in zip(pairs, hypotheses)],
    }, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

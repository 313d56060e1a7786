"""Fine-tuning's gain on a real domain shift: the Bible corpus split by testament.

    .venv/bin/python benchmarks/training/finetune.py --out runs/finetune \
        > benchmarks/results/finetune.json

With the installed console scripts, as a user would run them, on the tiny preset:

(a) `tfformer-train` on the Old Testament (`Gen`..`Mal` in train.refs) for `--old-minutes`;
(b) `tfformer-train --init-from (a)` on the New Testament (`Matt`..`Rev`) for `--new-minutes`,
    with the fine-tuning defaults (inverse_sqrt, warmup 400, peak 3e-4);
(c) `tfformer-train` on the New Testament alone, from scratch, for the same minutes;

then `tfformer-evaluate` with beam 4 on the New Testament's dev verses (dev.refs) for the last
weights of each, and for every epoch checkpoint of (b): its curve, at the minutes since (b)
started when the checkpoint was written. Each run trains alone on the machine; the minutes are
wall time, start-up, validation and dev BLEU included (`--max-minutes`). (a)'s dev set is the Old
Testament's dev verses; (b) and (c) validate on the New's. Each run builds its vocabulary from its
own training text: (a)'s and so (b)'s from the Old Testament, (c)'s from the New.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import platform
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
import common  # noqa: E402
from common import BIN, ROOT  # noqa: E402

log = common.logger("finetune")
run = functools.partial(common.run, log=log)
DATA = os.path.join(ROOT, "..", "shared", "data", "bible-es-en")
# The first book of the New Testament: train.refs and dev.refs are in canonical order.
NEW_TESTAMENT_STARTS = "Matt."
# The bible-es-en-cpu recipe's settings, which every run shares (but its 30 minutes).
COMMON = ["--batch-tokens", "2048", "--steps-per-epoch", "250", "--steps", "1000000",
          "--dev-sentences", "100", "--mixed-precision", "auto", "--jit", "auto",
          "--verbose", "0"]




def split_by_testament(name: str, out: str) -> dict[str, dict]:
    """Writes OUT/{old,new}-NAME.tsv from DATA/NAME.tsv by NAME.refs; returns their paths and
    line counts."""
    with open(os.path.join(DATA, name + ".tsv"), encoding="utf-8") as f:
        pairs = f.readlines()
    with open(os.path.join(DATA, name + ".refs"), encoding="utf-8") as f:
        refs = [line.split("\t")[0] for line in f]
    if len(pairs) != len(refs):
        raise SystemExit(f"{name}.tsv has {len(pairs)} lines, {name}.refs {len(refs)}")
    first_new = next(i for i, ref in enumerate(refs) if ref.startswith(NEW_TESTAMENT_STARTS))
    parts = {}
    for part, lines in (("old", pairs[:first_new]), ("new", pairs[first_new:])):
        path = os.path.join(out, f"{part}-{name}.tsv")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines)
        parts[part] = {"path": path, "pairs": len(lines),
                       "first": refs[0 if part == "old" else first_new],
                       "last": refs[first_new - 1 if part == "old" else -1]}
    return parts


def train(out: str, data: str, minutes: float, *flags: str) -> dict:
    started = time.time()
    run(os.path.join(BIN, "tfformer-train"), "--out", out, "--data", data,
        "--max-minutes", str(minutes), *COMMON, *flags, log_to=os.path.join(out + ".log"))
    return {"started": started, "wall_minutes": round((time.time() - started) / 60, 2),
            "command": " ".join(["tfformer-train", "--out", out, "--data", data,
                                 "--max-minutes", str(minutes), *COMMON, *flags])}


def evaluate(run_dir: str, test: str, out: str, *flags: str) -> dict:
    report = json.loads(run(os.path.join(BIN, "tfformer-evaluate"), run_dir, "--data", test,
                            "--beam-size", "4", "--out", out, *flags)
                        .strip().splitlines()[-1])
    return {key: report[key] for key in ("bleu", "chrf", "bleu_signature", "sentences")}


def steps_by_epoch(run_dir: str) -> dict[int, int]:
    """The optimizer step at each epoch's end, from the run's metrics.csv."""
    with open(os.path.join(run_dir, "metrics.csv"), encoding="utf-8") as f:
        return {int(row["epoch"]): int(row["step"]) for row in csv.DictReader(f)}


def cpu_name() -> dict:
    flags, name = [], platform.processor()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return {"model": name, "cores": os.cpu_count(),
            "flags": [flag for flag in wanted if flag in flags]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/finetune", help="a new directory for the runs")
    parser.add_argument("--old-minutes", type=float, default=20.0,
                        help="(a)'s budget on the Old Testament")
    parser.add_argument("--new-minutes", type=float, default=10.0,
                        help="(b)'s and (c)'s budget on the New Testament")
    parser.add_argument("--vocab-size", type=int, default=8000)
    args = parser.parse_args(argv)
    out = args.out
    if os.path.exists(os.path.join(out, "old")):
        raise SystemExit(f"{out} already holds runs: the benchmark starts from scratch")
    os.makedirs(out, exist_ok=True)
    train_parts = split_by_testament("train", out)
    dev_parts = split_by_testament("dev", out)
    old, new, scratch = (os.path.join(out, name) for name in ("old", "finetuned", "scratch"))
    new_dev = dev_parts["new"]["path"]

    def data(part: str) -> str:
        return f"tsv:{train_parts[part]['path']},{dev_parts[part]['path']}"

    runs = {
        "a_old_testament": train(old, data("old"), args.old_minutes, "--config", "tiny",
                                 "--vocab-size", str(args.vocab_size)),
        "b_finetuned": train(new, data("new"), args.new_minutes, "--init-from", old,
                             "--keep-checkpoints", "1000"),
        "c_new_from_scratch": train(scratch, data("new"), args.new_minutes, "--config", "tiny",
                                    "--vocab-size", str(args.vocab_size)),
    }
    for name, directory in zip(runs, (old, new, scratch)):
        runs[name]["final_step"] = max(steps_by_epoch(directory).values(), default=0)
        runs[name]["new_testament_dev_beam4"] = evaluate(
            directory, new_dev, os.path.join(out, "eval-" + os.path.basename(directory)))
        log(f"{name}: BLEU {runs[name]['new_testament_dev_beam4']['bleu']}")
    curve = [{"minutes": 0.0, "epoch": 0, "bleu":
              runs["a_old_testament"]["new_testament_dev_beam4"]["bleu"]}]
    checkpoints = sorted(os.listdir(os.path.join(new, "checkpoints")),
                         key=lambda name: int(re.search(r"(\d+)", name).group(1)))
    steps = steps_by_epoch(new)
    for name in checkpoints:
        path = os.path.join(new, "checkpoints", name)
        epoch = int(re.search(r"(\d+)", name).group(1))
        score = evaluate(new, new_dev, os.path.join(out, f"eval-finetuned-{epoch}"),
                         "--checkpoint", path)
        curve.append({"minutes": round((os.path.getmtime(path) - runs["b_finetuned"]["started"])
                                       / 60, 2), "epoch": epoch, "step": steps.get(epoch),
                      "bleu": score["bleu"], "chrf": score["chrf"]})
        log(f"(b) epoch {epoch}: BLEU {score['bleu']}")
    bleu = {name: runs[name]["new_testament_dev_beam4"]["bleu"] for name in runs}
    for entry in runs.values():
        entry.pop("started")
    import tensorflow as tf

    print(json.dumps({
        "what": __doc__.split("\n\n")[0],
        "command": f"{sys.executable} benchmarks/training/finetune.py --out {out} --old-minutes "
                   f"{args.old_minutes} --new-minutes {args.new_minutes}",
        "cpu": cpu_name(), "tensorflow": tf.__version__,
        "train_split": train_parts, "dev_split": dev_parts,
        "test_set": "the New Testament's dev verses, beam 4, last weights, sacreBLEU",
        "runs": runs, "bleu": bleu,
        "gain_over_a": round(bleu["b_finetuned"] - bleu["a_old_testament"], 2),
        "gain_over_c": round(bleu["b_finetuned"] - bleu["c_new_from_scratch"], 2),
        "target": "(b) beats (a) and (c) by at least 2 BLEU",
        "b_curve": curve,
    }, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

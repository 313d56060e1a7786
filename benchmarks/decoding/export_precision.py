"""Quality of a bf16 export against the float32 one, on the same trained run.

    .venv/bin/python benchmarks/decoding/export_precision.py runs/bible-quality \
        --test ../shared/data/bible-es-en/dev.tsv > benchmarks/results/export_precision.json

Runs what a user would: `tfformer-export RUN --precision fp32` and `--precision bf16` (the
paper's beam 4, length penalty 0.6), then `tfformer-evaluate` of each export on the test TSV.
The JSON holds both scores (sacreBLEU BLEU and chrF with signatures), bf16's BLEU minus
float32's (target: within 0.3), how many translations differ, each evaluation's seconds, and the
CPU's flags that decide whether bf16 multiplies natively (AVX512_BF16, AMX).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
import common  # noqa: E402
from common import BIN, ROOT  # noqa: E402

log = common.logger("export_precision")
run = functools.partial(common.run, log=log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a trained run (model.keras + tokenizer.model)")
    parser.add_argument("--test", required=True, help="a TSV of source<TAB>reference lines")
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from tfformer.utils.cpu import matmul_flags

    results = {"run_dir": args.run_dir, "test": args.test, "cpu_flags": matmul_flags(),
               "cpu_count": os.cpu_count(), "precisions": {}}
    hypotheses = {}
    with tempfile.TemporaryDirectory() as work:
        for precision in ("fp32", "bf16"):
            models = os.path.join(work, "models")
            run(os.path.join(BIN, "tfformer-export"), args.run_dir, "--model-base-path", models,
                "--name", precision, "--precision", precision)
            started = time.time()
            out = os.path.join(work, f"eval-{precision}")
            report = json.loads(run(os.path.join(BIN, "tfformer-evaluate"),
                                    os.path.join(models, precision), "--data", args.test,
                                    "--out", out).strip().splitlines()[-1])
            with open(os.path.join(out, "hypotheses.txt"), encoding="utf-8") as f:
                hypotheses[precision] = f.read().splitlines()
            results["precisions"][precision] = {
                key: report[key] for key in ("bleu", "chrf", "bleu_signature", "chrf_signature",
                                             "sentences")}
            results["precisions"][precision]["seconds"] = round(time.time() - started, 1)
            log(f"{precision}: BLEU {report['bleu']}, chrF {report['chrf']}")
    scores = results["precisions"]
    results["bf16_minus_fp32_bleu"] = round(scores["bf16"]["bleu"] - scores["fp32"]["bleu"], 2)
    results["translations_that_differ"] = sum(
        a != b for a, b in zip(hypotheses["fp32"], hypotheses["bf16"], strict=True))
    results["within_0_3_bleu"] = abs(results["bf16_minus_fp32_bleu"]) <= 0.3
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

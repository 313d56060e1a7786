"""TensorFlow's thread pools for decoding: `benchmarks/decoding/decode.py --formats only` run in
turn under each thread setting (TensorFlow's defaults, one intra-op and one inter-op thread,
...), round after round, so that each setting's time over CTranslate2 fp32's (measured beside it
in the same run, in a process of its own) is compared across runs that saw the same machine.
JSON on stdout.

    .venv/bin/python benchmarks/decoding/decode_threads.py --presets tiny --rounds 3 \
        > decode_threads.json

A setting is `INTRA/INTER` (`TF_NUM_INTRAOP_THREADS`, `TF_NUM_INTEROP_THREADS`; `default` leaves
both unset: one intra-op thread per core), optionally followed by `,onednn=0` or `,onednn=1`
(`TF_ENABLE_ONEDNN_OPTS`; unset otherwise: TensorFlow's choice for the CPU). TF Serving's flags
for the same pools are `--tensorflow_intra_op_parallelism` and
`--tensorflow_inter_op_parallelism`; it reads `TF_ENABLE_ONEDNN_OPTS` from its environment as
any TensorFlow process does. CTranslate2 keeps `decode.py`'s `--threads` in every run.

    .venv/bin/python benchmarks/decoding/decode_threads.py --settings default default,onednn=0 \
        1/1,onednn=0 --rounds 2 > decode_onednn.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = ("preset", "search", "batch")


def environment(setting: str) -> dict[str, str]:
    """The environment of a decode.py run under `setting` ("default" or "INTRA/INTER", then
    optionally ",onednn=0" or ",onednn=1")."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                        "TF_ENABLE_ONEDNN_OPTS")}
    threads, _, onednn = setting.partition(",")
    if onednn:
        if onednn not in ("onednn=0", "onednn=1"):
            raise ValueError(f"after the threads, a setting takes ',onednn=0' or ',onednn=1', "
                             f"got {setting!r}")
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn[-1]
    if threads != "default":
        intra, _, inter = threads.partition("/")
        if not (intra.isdigit() and inter.isdigit() and int(intra) > 0 and int(inter) > 0):
            raise ValueError(f"a thread setting is 'default' or INTRA/INTER (positive "
                             f"integers), got {setting!r}")
        env.update(TF_NUM_INTRAOP_THREADS=intra, TF_NUM_INTEROP_THREADS=inter)
    return env


def summarize(runs: list[dict]) -> list[dict]:
    """Per case and setting: the median over rounds of our fp32 time over CTranslate2 fp32's
    (each from one run) and of our fp32 milliseconds, and the median over rounds of that ratio
    against the first setting's in the same round (`time_over_FIRST`), and of our milliseconds
    against the first setting's in the same round (`ms_over_FIRST`: without CTranslate2's own
    noise, which on a shared 2-core machine can be 2x between runs). At batch 1, also the median
    of `floor_over_ctranslate2_fp32`: the step's matmuls alone with TensorFlow's kernels over
    CTranslate2 fp32's whole decoding, the least our float32 time over CTranslate2's can be.

    Args:
        runs: {"round", "setting", "formats": decode.py's "formats" rows}, in the order run.
    """
    settings = list(dict.fromkeys(run["setting"] for run in runs))
    rows: dict[tuple, dict[str, list]] = {}
    for run in runs:
        for row in run["formats"]:
            per_setting = rows.setdefault(tuple(row[k] for k in CASE), {})
            per_setting.setdefault(run["setting"], []).append(
                (run["round"], row["over_ctranslate2_fp32"]["savedmodel-fp32"],
                 row["savedmodel-fp32"]["median_ms"],
                 row.get("floor_over_ctranslate2_fp32")))  # batch 1 only
    summary = []
    for case, per_setting in rows.items():
        first = {round_: (ratio, ms) for round_, ratio, ms, _ in per_setting.get(settings[0], [])}
        for setting in settings:
            measured = per_setting.get(setting, [])
            if not measured:
                continue
            paired = [(ratio / first[round_][0], ms / first[round_][1])
                      for round_, ratio, ms, _ in measured if round_ in first]
            against_first = [ratio for ratio, _ in paired]
            ms_against_first = [ms for _, ms in paired]
            summary.append({
                **dict(zip(CASE, case)), "setting": setting, "rounds": len(measured),
                "savedmodel_fp32_ms": round(statistics.median(ms for _, _, ms, _ in measured), 1),
                "over_ctranslate2_fp32": round(statistics.median(r for _, r, _, _ in measured), 2),
                f"time_over_{settings[0]}": round(statistics.median(against_first), 2),
                f"ms_over_{settings[0]}": round(statistics.median(ms_against_first), 2)})
            floors = [floor for *_, floor in measured if floor is not None]
            if floors:
                summary[-1]["floor_over_ctranslate2_fp32"] = round(statistics.median(floors), 2)
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=["default", "1/1"],
                        help="settings, the first the reference: default or INTRA/INTER, then "
                             "optionally ,onednn=0 or ,onednn=1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--presets", nargs="+", default=["tiny"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    args = parser.parse_args(argv)
    for setting in args.settings:
        environment(setting)  # a bad setting fails before the first run

    runs = []
    for round_ in range(args.rounds):
        for setting in args.settings:
            result = subprocess.run(
                [sys.executable, os.path.join(HERE, "decode.py"), "--formats", "only",
                 "--presets", *args.presets, "--batches", *map(str, args.batches)],
                env=environment(setting), capture_output=True, text=True)
            if result.returncode != 0:
                print(result.stderr[-3000:], file=sys.stderr)
                return 1
            report = json.loads(result.stdout)
            runs.append({"round": round_, "setting": setting, "formats": report["formats"]})
            print(json.dumps({"round": round_, "setting": setting, "over_ctranslate2_fp32": [
                row["over_ctranslate2_fp32"]["savedmodel-fp32"] for row in report["formats"]]}),
                file=sys.stderr, flush=True)
    first = runs[0]["formats"][0]
    print(json.dumps({"cpu_flags": first["cpu_flags"], "onednn": first["onednn"],
                      "cpu_count": os.cpu_count(), "settings": args.settings,
                      "rounds": args.rounds, "summary": summarize(runs), "runs": runs},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

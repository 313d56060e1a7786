"""The prepared store (`tfformer-prepare`) and its NumPy loader against the tf.data stream: time to
prepare, batches per second on one core, and the data time of a resume at batch 5,000.

    .venv/bin/python benchmarks/data/store.py > benchmarks/results/store.json
    .venv/bin/python benchmarks/data/store.py --scale 4500000 > benchmarks/results/store_wmt.json

Default: the Bible corpus (../shared/data/bible-es-en) with its recipe's batches (2048 tokens,
max length 256, the default bucket grid; packed rows of 128 as well). Measured in this one
process, on one machine:

1. `tfformer-prepare` of the corpus: seconds, the store's size.
2. The loader alone (no background thread: one core) over a whole epoch: batches/s and target
   tokens/s, bucketed and packed.
3. A resume at batch 5,000: the time to the first batch of a new loader (packed: with and
   without the epoch sizes the run keeps), against the tf.data stream's, which reads again and
   skips the batches trained on (`tfformer.train.inputs.training_batches`).

With --scale N: a synthetic WMT14-size corpus of N pairs (`benchmarks/data/data_scale.py`'s), the
base model's batches (25,000 tokens, max length 256): prepare (time, peak RSS, in a fresh
process), then the first batch and tokens/s of the loader. JSON on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: common
from common import logger  # noqa: E402

log = logger("store")
sys.path.insert(0, ROOT)
BIBLE = os.path.join(ROOT, "..", "shared", "data", "bible-es-en")
RESUME_AT = 5000



def loader_rate(loader, seconds: float = 20.0) -> dict:
    """Batches of one epoch (at most `seconds`) built in this thread: their rate."""
    started = time.perf_counter()
    batches = tokens = 0
    for _, target in loader.epoch(0):
        batches += 1
        tokens += int((target != 0).sum())
        if time.perf_counter() - started > seconds:
            break
    elapsed = time.perf_counter() - started
    return {"batches": batches, "batches_per_second": round(batches / elapsed, 1),
            "target_tokens_per_second": round(tokens / elapsed)}


def first_batch_seconds(loader, start: int) -> float:
    started = time.perf_counter()
    stream = loader.batches(start, prefetch=0)
    next(stream)
    return round(time.perf_counter() - started, 4)


def bible(out: str) -> dict:
    from tfformer.data.loader import Loader
    from tfformer.data.store import Store
    from tfformer.train import inputs
    from tfformer.train.prepare import prepare_store
    from tfformer.utils.run_dir import RunDir

    spec = f"tsv:{BIBLE}/train.tsv,{BIBLE}/dev.tsv"
    started = time.perf_counter()
    prepared = prepare_store(spec, os.path.join(out, "store"), vocab_size=8000)
    result = {"corpus": "bible-es-en", "prepare_seconds": round(time.perf_counter() - started, 1),
              "store_bytes": sum(os.path.getsize(os.path.join(prepared.path, name))
                                 for name in os.listdir(prepared.path)),
              "pairs": prepared.manifest["splits"]["train"]["pairs"]}
    log(f"prepared in {result['prepare_seconds']} s")
    store = Store.open(prepared.path)
    shapes = {"bucketed": dict(batch_tokens=2048, max_length=256),
              "packed_128": dict(batch_tokens=2048, max_length=256, pack_length=128)}
    for name, shape in shapes.items():
        loader = Loader(store.train, **shape, seed=0)
        rate = loader_rate(loader)
        log(f"{name}: {rate}")
        cold = Loader(store.train, **shape, seed=0)
        resume = {"without_epoch_sizes": first_batch_seconds(cold, RESUME_AT)}
        sizes = cold.epoch_sizes
        if shape.get("pack_length"):
            warm = Loader(store.train, **shape, seed=0, known_epoch_sizes=sizes)
            resume["with_epoch_sizes"] = first_batch_seconds(warm, RESUME_AT)
        result[name] = {**rate, "batches_per_epoch": loader.epoch_size(0),
                        f"resume_at_{RESUME_AT}_seconds": resume}
        log(f"{name}: resume {resume}")

    # The tf.data stream of the same corpus, as a resumed tfformer-train reads it.
    run = RunDir(os.path.join(out, "run"))
    data = inputs.prepare(run, chief=True, spec=spec, skip_bad_lines=False, seed=0,
                          vocab_size=8000, vocab_sample=1_000_000)
    for name, shape in shapes.items():
        for start in (0, RESUME_AT):
            started = time.perf_counter()
            stream = iter(inputs.training_batches(data, start, seed=0, **shape))
            next(stream)
            seconds = round(time.perf_counter() - started, 2)
            result[name].setdefault("tf_data_first_batch_seconds", {})[
                f"from_{start}"] = seconds
            log(f"tf.data {name} from batch {start}: {seconds} s")
        first = result[name]["tf_data_first_batch_seconds"][f"from_{RESUME_AT}"]
        resume = result[name][f"resume_at_{RESUME_AT}_seconds"]
        ours = resume.get("with_epoch_sizes", resume["without_epoch_sizes"])  # as a run does
        result[name]["resume_speedup"] = round(first / ours, 1)
    return result


def prepare_in_fresh_process(spec: str, out: str, vocab_size: int) -> dict:
    code = (
        "import json, resource, sys, time\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from tfformer.train.prepare import prepare_store\n"
        "started = time.perf_counter()\n"
        f"p = prepare_store({spec!r}, {out!r}, vocab_size={vocab_size})\n"
        "print(json.dumps({'seconds': round(time.perf_counter() - started, 1),\n"
        "  'peak_rss_mb': round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),\n"
        "  'pairs': p.manifest['splits']['train']['pairs'],\n"
        "  'target_tokens': p.manifest['splits']['train']['target_tokens']}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def scale(out: str, pairs: int) -> dict:
    from benchmarks.data_scale import write_corpus

    from tfformer.data.loader import Loader
    from tfformer.data.store import Store

    started = time.perf_counter()
    files = write_corpus(out, pairs, shards=8)
    written = round(time.perf_counter() - started, 1)
    spec = "tsv:" + "+".join(files)
    log("preparing")
    prepared = prepare_in_fresh_process(spec, os.path.join(out, "store"), 37000)
    log(f"prepared: {prepared}")
    loaders = {}
    for name, pack_length in (("bucketed", 0), ("packed_256", 256)):
        started = time.perf_counter()
        store = Store.open(os.path.join(out, "store"))
        loader = Loader(store.train, batch_tokens=25000, max_length=256,
                        pack_length=pack_length, seed=0)
        stream = loader.batches(0, prefetch=0)
        next(stream)
        first = round(time.perf_counter() - started, 2)
        rate = loader_rate(loader, seconds=60)
        loaders[name] = {"first_batch_seconds": first, **rate}
        log(f"{name}: {loaders[name]}")
    peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"corpus": f"synthetic WMT14-size ({pairs} pairs, benchmarks/data/data_scale.py)",
            "corpus_write_seconds": written, "prepare": prepared,
            "loader": {**loaders, "peak_rss_mb": peak},
            "targets": {"prepare_under_10_minutes": prepared["seconds"] <= 600,
                        "prepare_under_2_gb": prepared["peak_rss_mb"] <= 2048,
                        "first_batch_under_10_s": all(
                            r["first_batch_seconds"] <= 10 for r in loaders.values()),
                        "one_core_at_least_1.5M_target_tokens_per_s": all(
                            r["target_tokens_per_second"] >= 1_500_000
                            for r in loaders.values())}}


def main() -> None:
    from tfformer.utils.cpu import matmul_flags

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=0, metavar="PAIRS",
                        help="a synthetic corpus of this many pairs instead of the Bible")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory() as out:
        result = scale(out, args.scale) if args.scale else bible(out)
    print(json.dumps({"machine": f"{os.cpu_count()} CPU cores", "cpu_flags": matmul_flags(),
                      **result}, indent=1))


if __name__ == "__main__":
    main()

"""Decoding speed of two revisions of tfformer on the same weights, timed in one process.

    .venv/bin/python benchmarks/decoding/decode_compare.py d43e7c6 HEAD > decode_compare.json
    .venv/bin/python benchmarks/decoding/decode_compare.py HEAD .          # . is the working tree

On a shared machine whose speed drifts by 10-30% between runs, two decode.py runs cannot tell
a change of a few percent. Here each revision (checked out in a temporary git worktree) exports
one run directory, decode.py's random model, whose every hypothesis is 64 tokens (greedy and
beam 4 with length penalty 0.6), in a process that imports that revision's tfformer. A
SavedModel needs no tfformer to run, so one process then loads all the exports and calls them in
turn, round after round, with decode.py's `paired_all`: drift hits both revisions alike.

Each row gives both medians, `b_over_a` (the second revision's time over the first's) and
whether both translate alike (`same_translations`, which a speed-up must keep).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402  (benchmarks/decoding/decode.py: the model, the sentence, paired_all)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEARCHES = {"greedy": 1, "beam4": 4}

# Runs with the revision's checkout first on sys.path: exports the run directory's model with
# that revision's search, without the check sentences (the parent compares the outputs).
# Its model.keras is rebuilt from the weights and the config fields that revision knows: an
# older tfformer refuses a config with fields added since, whatever their values. The model is
# a preset's, so those fields hold their defaults; `same_translations` checks the outcome.
_EXPORT_SCRIPT = """
import dataclasses, json, os, shutil, sys
root, shared_run, base, extra, searches = sys.argv[1:6]
sys.path.insert(0, root)
import tfformer
assert tfformer.__file__.startswith(root), tfformer.__file__
from tfformer.config import TransformerConfig
from tfformer.decode.translator import load_translator
from tfformer.export.saved_model import export_saved_model
from tfformer.model.transformer import Transformer
run_dir = base + "-run"
os.makedirs(run_dir)
shutil.copy(os.path.join(shared_run, "tokenizer.model"), run_dir)
with open(os.path.join(shared_run, "config.json")) as f:
    values = json.load(f)
known = {field.name for field in dataclasses.fields(TransformerConfig)}
model = Transformer(TransformerConfig(**{k: v for k, v in values.items() if k in known}))
model.build()
model.load_weights(os.path.join(shared_run, "model.weights.h5"))
model.save(os.path.join(run_dir, "model.keras"))
for name, beam_size in json.loads(searches).items():
    export_saved_model(load_translator(run_dir, beam_size=beam_size, length_penalty=0.6,
                                       max_output_extra=int(extra)), base, name, 1)
"""


def resolve(revision: str) -> str:
    """The commit a revision names ("." stays the working tree)."""
    if revision == ".":
        return "."
    return subprocess.run(["git", "rev-parse", "--verify", revision + "^{commit}"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout.strip()


def export_with(revision: str, run_dir: str, base: str, extra: int, work: str) -> None:
    """Exports `run_dir` under `base` with `revision`'s tfformer."""
    root = ROOT
    if revision != ".":
        root = os.path.join(work, f"checkout-{revision[:12]}")
        subprocess.run(["git", "worktree", "add", "--detach", "-f", root, revision], cwd=ROOT,
                       check=True, capture_output=True)
    try:
        env = {**os.environ, "PYTHONPATH": root}
        subprocess.run([sys.executable, "-c", _EXPORT_SCRIPT, root, run_dir, base, str(extra),
                        json.dumps(SEARCHES)], check=True, env=env, cwd=work,
                       stdout=subprocess.DEVNULL)
    finally:
        if revision != ".":
            subprocess.run(["git", "worktree", "remove", "--force", root], cwd=ROOT,
                           capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the first revision (a commit, a branch, HEAD, or .)")
    parser.add_argument("b", help="the second revision")
    parser.add_argument("--preset", default="tiny", choices=("tiny", "base"))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--reps", type=int, default=12, help="calls of each export (rounds)")
    parser.add_argument("--budget", type=float, default=300.0,
                        help="seconds of timed calls after which fewer rounds are made")
    args = parser.parse_args()

    import keras

    keras.utils.set_random_seed(0)  # before the tokenizer's tf-text resource
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the exports' SentencePiece ops)

    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.utils.cpu import matmul_flags

    revisions = {"a": resolve(args.a), "b": resolve(args.b)}
    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    model, source = decode.build(args.preset, tokenizer)
    extra = decode.OUTPUT_TOKENS - len(source)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        run_dir = decode.save_run(model, tokenizer, work)
        model.save_weights(os.path.join(run_dir, "model.weights.h5"))
        with open(os.path.join(run_dir, "config.json"), "w", encoding="utf-8") as f:
            f.write(model.transformer_config.to_json())
        signatures = {}
        for key, revision in revisions.items():
            base = os.path.join(work, f"models-{key}")
            export_with(revision, run_dir, base, extra, work)
            for search in SEARCHES:
                signatures[key, search] = tf.saved_model.load(
                    os.path.join(base, search, "1")).signatures["serving_default"]
        for search in SEARCHES:
            for batch in args.batches:
                inputs = tf.constant([decode.SENTENCE] * batch)
                calls = {key: (lambda s=signatures[key, search]: s(inputs=inputs))
                         for key in revisions}
                same = (calls["a"]()["translations"].numpy().tolist()
                        == calls["b"]()["translations"].numpy().tolist())
                timings = decode.paired_all(calls, args.reps, args.budget, warm_up=False,
                                            settle_seconds=0.05)
                row = {"preset": args.preset, "search": search, "batch": batch,
                       "a_ms": timings["a"]["median_ms"], "b_ms": timings["b"]["median_ms"],
                       "runs": timings["a"]["runs"],
                       "b_over_a": round(timings["b"]["median_ms"] / timings["a"]["median_ms"],
                                         3),
                       "same_translations": same}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"revisions": {"a": args.a, "b": args.b, **{
        f"{key}_commit": commit for key, commit in revisions.items()}},
        "output_tokens": decode.OUTPUT_TOKENS, "tensorflow": tf.__version__,
        "cpu_count": os.cpu_count(), "cpu_flags": matmul_flags(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""Scoring speed: pairs scored per second by our SavedModel's `score` signature against
CTranslate2's `score_batch` on the same weights (`tfformer-export --format ctranslate2`), batch
32, CTranslate2 in a process of its own with 2 threads (`ct2_process.py`). JSON on stdout.

    .venv/bin/python benchmarks/decoding/score.py > benchmarks/results/score.json

Models: random weights of each preset, vocabulary 4000 (SentencePiece on the built-in corpus);
pairs: the built-in corpus' (source, target), batched in length order as `tfformer-score` does,
the same batches for both engines, timed in turn round after round (one round scores every
pair). `ours_over_ctranslate2` is our time over CTranslate2's; `ours_model_pass` times the
model's teacher-forced pass alone (encoder, decoder and logits, no tokenizer, no log-softmax):
what no change to the scoring around it can go below. `max_token_difference` the
largest difference of a token's log-probability between the two (a check that both scored the
same thing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cpu_model, logger  # noqa: E402
from decoding.decode import SETTLE_SECONDS, paired_all, save_run  # noqa: E402

log = logger("score")


def measure(preset: str, tokenizer, pairs, batch_size: int, threads: int, reps: int,
            budget: float) -> dict:
    import numpy as np
    import sentencepiece
    import tensorflow as tf
    from ct2_process import CT2Process

    from tfformer import Transformer, get_preset
    from tfformer.decode.translator import Translator
    from tfformer.export.saved_model import export_saved_model

    model = Transformer(get_preset(preset, vocab_size=tokenizer.vocab_size, dropout=0.0))
    model.build()
    pairs = sorted(pairs, key=lambda pair: (len(pair[0]) + len(pair[1]), pair))
    batches = [pairs[i:i + batch_size] for i in range(0, len(pairs), batch_size)]
    with tempfile.TemporaryDirectory() as work:
        run = save_run(model, tokenizer, work)
        out = os.path.join(work, "ct2")
        with CT2Process.exported(run, out, threads) as ctranslate2:
            path = export_saved_model(Translator(model, tokenizer, beam_size=1), work, "ours", 1)
            score = tf.saved_model.load(path).signatures["score"]
            pieces = sentencepiece.SentencePieceProcessor(
                model_file=os.path.join(out, "tokenizer.model"))
            feeds = [{"inputs": tf.constant([s for s, _ in batch]),
                      "targets": tf.constant([t for _, t in batch])} for batch in batches]
            tokens = [([pieces.encode(s, out_type=str) for s, _ in batch],
                       [pieces.encode(t, out_type=str) for _, t in batch]) for batch in batches]
            worst = 0.0
            for feed, (sources, targets) in zip(feeds, tokens):
                ours = score(**feed)
                theirs = ctranslate2.score_batch(sources, targets, log_probs=True)
                rows, lengths = ours["token_scores"].numpy(), ours["lengths"].numpy()
                for row, length, values in zip(rows, lengths, theirs):
                    worst = max(worst, float(np.max(np.abs(row[:length] - values))))
            # The bound: the model's teacher-forced pass alone, on ids tokenized beforehand.
            ids = [(tokenizer.encode_source(feed["inputs"]).to_tensor(),
                    tokenizer.encode_target(feed["targets"])[0].to_tensor()) for feed in feeds]
            model_pass = tf.function(lambda source, target: model((source, target),
                                                                  training=False))
            timings = paired_all({
                "ours": lambda: [score(**feed) for feed in feeds],
                "ours_model_pass": lambda: [model_pass(*pair) for pair in ids],
                "ctranslate2": lambda: [ctranslate2.score_batch(*batch) for batch in tokens],
            }, reps, budget, settle_seconds=SETTLE_SECONDS)
    row = {"preset": preset, "pairs": len(pairs), "batch": batch_size,
           "target_pieces": sum(len(t) + 1 for _, targets in tokens for t in targets),
           "ctranslate2_threads": threads, "max_token_difference": worst}
    for name, timing in timings.items():
        row[f"{name}_ms"] = timing["median_ms"]
        row[f"{name}_pairs_per_s"] = round(1000 * len(pairs) / timing["median_ms"], 1)
        row["runs"] = timing["runs"]
    for name in ("ours", "ours_model_pass"):
        row[f"{name}_over_ctranslate2"] = round(timings[name]["median_ms"]
                                                / timings["ctranslate2"]["median_ms"], 2)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "base"])
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2's intra_threads")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--budget", type=float, default=30.0,
                        help="seconds of timed rounds per preset at most (after warm-up)")
    args = parser.parse_args(argv)

    from importlib.metadata import version

    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)  # before the tokenizer's tf-text resource
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.utils.cpu import matmul_flags

    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    pairs = list(builtin_pairs("train", n=args.pairs))
    results = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "cpu_flags": matmul_flags(),
               "tensorflow": tf.__version__, "ctranslate2": version("ctranslate2"),
               "TF_NUM_INTRAOP_THREADS": os.environ.get("TF_NUM_INTRAOP_THREADS"),
               "vocab_size": tokenizer.vocab_size, "rows": []}
    for preset in args.presets:
        row = measure(preset, tokenizer, pairs, args.batch_size, args.threads, args.reps,
                      args.budget)
        log(json.dumps(row))
        results["rows"].append(row)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Would an XLA-compiled search pay in the export? The search of the SavedModel (TensorFlow's
graph loop, `tfformer.decode.search`, growing shapes, no XLA) against the same search compiled by
XLA (`tf.function(jit_compile=True)` over the fixed-capacity loop of
`tfformer.decode.keras_search`, which TF Serving would run with `--xla_cpu_compilation_enabled`)
and against CTranslate2 fp32, on the same weights. JSON on stdout.

    .venv/bin/python benchmarks/decoding/xla_search.py > benchmarks/results/xla_search.json
    .venv/bin/python benchmarks/decoding/xla_search.py --presets tiny --batches 1 --reps 2

decode.py's model and sentence: every hypothesis is exactly 64 tokens, so the fixed capacity
is what the search uses (no steps wasted past the end). The XLA contender tokenizes and
detokenizes with the export's own graph functions around the compiled search, so each
contender turns strings into strings. `xla_first_call_ms` is the compile of one input shape: XLA
compiles each (batch, source length) anew, which a server would pay for every new shape.
`over_savedmodel` is each median over the plain export's, called in turn round after round
(`decode.paired_all`); CTranslate2 runs in a process of its own (`ct2_process.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402  (the model, the sentence, paired_all, save_run)

SEARCHES = {"greedy": 1, "beam4": 4}


def compare(preset: str, model, tokenizer, extra: int, batches, reps: int, budget: float,
            threads: int) -> list[dict]:
    import numpy as np
    import sentencepiece
    import tensorflow as tf
    from ct2_process import CT2Process

    from tfformer.decode import keras_search
    from tfformer.decode.translator import Translator
    from tfformer.export.saved_model import export_saved_model

    rows = []
    with tempfile.TemporaryDirectory() as work:
        run = decode.save_run(model, tokenizer, work)
        out = os.path.join(work, "ct2")
        with CT2Process.exported(run, out, threads) as ct2_worker:
            pieces = sentencepiece.SentencePieceProcessor(
                model_file=os.path.join(out, "tokenizer.model"))
            for search, beam_size in SEARCHES.items():
                translator = Translator(model, tokenizer, beam_size=beam_size,
                                        max_output_extra=extra)
                signature = tf.saved_model.load(export_saved_model(
                    translator, work, search, 1)).signatures["serving_default"]
                source_ids = tf.function(translator._source_ids, autograph=False)
                detokenize = tf.function(tokenizer.detokenize, autograph=False)
                if beam_size == 1:
                    def fixed(ids):
                        return keras_search._greedy(model, ids, None, extra, 0)
                else:
                    def fixed(ids):
                        return keras_search._beam(model, ids, None, beam_size,
                                                  translator.length_penalty, extra, 0,
                                                  translator.decoding.length_penalty_form)
                compiled = tf.function(fixed, jit_compile=True, autograph=False)

                def xla(inputs):
                    sequences, scores, _ = compiled(source_ids(inputs))
                    best = sequences[:, 0] if beam_size > 1 else sequences
                    return detokenize(best[:, 1:]), scores

                for batch in batches:
                    inputs = tf.constant([decode.SENTENCE] * batch)
                    tokens = [pieces.encode(decode.SENTENCE, out_type=str)] * batch
                    started = time.perf_counter()
                    xla_texts = xla(inputs)[0].numpy()
                    first = time.perf_counter() - started
                    ours = signature(inputs=inputs)["translations"].numpy()

                    def ct2(hypotheses=False, tokens=tokens, beam_size=beam_size):
                        return decode.ct2_translate(ct2_worker, tokens, beam_size, hypotheses)

                    timings = decode.paired_all({
                        "savedmodel": lambda: signature(inputs=inputs),
                        "xla": lambda: xla(inputs),
                        "ctranslate2_fp32": ct2,
                    }, reps * 2 if batch == 1 else reps, budget,
                        settle_seconds=decode.SETTLE_SECONDS)
                    reference = timings["savedmodel"]["median_ms"]
                    row = {"preset": preset, "search": search, "batch": batch,
                           "same_translations": bool(np.array_equal(xla_texts, ours)),
                           "ctranslate2_output_pieces": len(ct2(hypotheses=True)[0]),
                           "xla_first_call_ms": round(1000 * first, 1),
                           **{name: timing["median_ms"] for name, timing in timings.items()},
                           "over_savedmodel": {name: round(timing["median_ms"] / reference, 3)
                                               for name, timing in timings.items()}}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "base"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of timed calls per measurement at most (after warm-up)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CTranslate2's intra_threads (TensorFlow uses every core)")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)  # before the tokenizer's tf-text resource
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.utils.cpu import matmul_flags

    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    from importlib.metadata import version

    results = {"output_tokens": decode.OUTPUT_TOKENS, "vocab_size": tokenizer.vocab_size,
               "tensorflow": tf.__version__, "ctranslate2": version("ctranslate2"),
               "cpu_count": os.cpu_count(), "cpu_flags": matmul_flags(), "rows": []}
    for preset in args.presets:
        model, source = decode.build(preset, tokenizer)
        results["rows"] += compare(preset, model, tokenizer, decode.OUTPUT_TOKENS - len(source),
                                   args.batches, args.reps, args.budget, args.threads)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the search options cost: `--no-repeat-ngram` on and off against CTranslate2's
`no_repeat_ngram_size`, and the default signature against another checkout's export of the
same weights (did a change make it slower?). JSON on stdout.

    git worktree add /tmp/baseline f1174f5   # before the search options
    PYTHONPATH=/tmp/baseline .venv/bin/python benchmarks/decoding/decode_options.py \
        --export-only /tmp/b
    .venv/bin/python benchmarks/decoding/decode_options.py --baseline /tmp/b > decode_options.json

The model is decode.py's random tiny one: every hypothesis is 64 tokens long (EOS never wins),
and its greedy outputs repeat, so the guard acts at almost every step. Each row calls every
SavedModel (and CTranslate2 fp32 with and without the guard) in turn, round after round, the
order shuffled each round: median ms and the ratios `ngram_over_default` and
`over_ctranslate2_fp32`; then the default and the baseline alone, in the same way, for
`default_over_baseline`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ct2_process import CT2Process  # noqa: E402
from decode import OUTPUT_TOKENS, SENTENCE, build  # noqa: E402

SEARCHES = (("greedy", 1), ("beam4", 4))


def shuffled_all(functions: dict, reps: int, budget_seconds: float) -> dict:
    """decode.py's `paired_all`, with the calling order shuffled every round (seeded): the call
    right after CTranslate2's, whose threads keep spinning a while once it returns, is a
    different one from round to round (a fixed or rotated order keeps it the same)."""
    names = list(functions)
    for function in functions.values():
        function()
    order = random.Random(0)
    times = {name: [] for name in names}
    for round_ in range(reps):
        if round_ and sum(map(sum, times.values())) > budget_seconds:
            break
        order.shuffle(names)
        for name in names:
            start = time.perf_counter()
            functions[name]()
            times[name].append(time.perf_counter() - start)
    return {name: {"median_ms": round(1000 * statistics.median(t), 2), "runs": len(t)}
            for name, t in times.items()}


def model_and_tokenizer(preset: str):
    import keras

    keras.utils.set_random_seed(0)  # as decode.py: the same tokenizer and weights
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    model, source = build(preset, tokenizer)
    return model, tokenizer, OUTPUT_TOKENS - len(source)


def export_all(model, tokenizer, extra: int, base: str, ngram: int | None) -> dict[str, str]:
    """SavedModels of each search, default and (with `ngram`) guarded: {name: version dir}."""
    from tfformer.decode.translator import Translator
    from tfformer.export.saved_model import export_saved_model

    paths = {}
    for search, beam_size in SEARCHES:
        for name, options in (("default", {}), ("ngram", {"no_repeat_ngram": ngram})):
            if name == "ngram" and not ngram:
                continue
            translator = Translator(model, tokenizer, beam_size=beam_size,
                                    max_output_extra=extra, **options)
            paths[f"{search}-{name}"] = export_saved_model(translator, base,
                                                           f"{search}-{name}", 1)
    return paths


def write_exports(preset: str, out: str, ngram: int | None) -> None:
    """This checkout's SavedModels (and, with `ngram`, the guarded ones and the CTranslate2
    model) of decode.py's random model, in `out`."""
    model, tokenizer, extra = model_and_tokenizer(preset)
    export_all(model, tokenizer, extra, out, ngram)
    if ngram:
        from tfformer.export.ctranslate2 import export_ctranslate2

        run = os.path.join(out, "run")
        os.makedirs(run)
        model.save(os.path.join(run, "model.keras"))
        tokenizer.save(os.path.join(run, "tokenizer.model"))
        export_ctranslate2(run, os.path.join(out, "ct2"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--no-repeat-ngram", type=int, default=3, metavar="N")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of timed calls per row at most (after warm-up)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CTranslate2's intra_threads (TensorFlow uses every core)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="exports of another checkout (--export-only) to time beside ours")
    parser.add_argument("--export-only", metavar="DIR",
                        help="write this checkout's default exports to DIR and stop")
    args = parser.parse_args(argv)
    if args.export_only:
        write_exports(args.preset, args.export_only, None)
        return 0

    from importlib.metadata import version

    import sentencepiece
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  the SentencePiece ops of the exports

    from tfformer.export.ctranslate2 import TRANSLATE_OPTIONS
    from tfformer.utils.cpu import matmul_flags

    results = {"preset": args.preset, "output_tokens": OUTPUT_TOKENS,
               "no_repeat_ngram": args.no_repeat_ngram, "tensorflow": tf.__version__,
               "ctranslate2": version("ctranslate2"), "cpu_count": os.cpu_count(),
               "cpu_flags": matmul_flags(), "baseline": args.baseline, "rows": []}
    with tempfile.TemporaryDirectory() as work:
        # Exported by another process: every SavedModel here is loaded from disk into a
        # process that built and traced none of them, as the baseline's are.
        subprocess.run([sys.executable, "-c", "import sys, decode_options as d; "
                        "d.write_exports(sys.argv[1], sys.argv[2], int(sys.argv[3]))",
                        args.preset, work, str(args.no_repeat_ngram)],
                       check=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        # In a process of its own, without TensorFlow (ct2_process.py).
        ct2 = CT2Process(os.path.join(work, "ct2"), args.threads)
        tokens = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(work, "ct2", "tokenizer.model")).encode(SENTENCE,
                                                                            out_type=str)
        for search, beam_size in SEARCHES:
            functions = {name: tf.saved_model.load(os.path.join(work, f"{search}-{name}", "1"))
                         .signatures["serving_default"] for name in ("default", "ngram")}
            if args.baseline:
                functions["baseline"] = tf.saved_model.load(
                    os.path.join(args.baseline, f"{search}-default", "1")
                ).signatures["serving_default"]
            for batch in args.batches:
                inputs = tf.constant([SENTENCE] * batch)
                calls = {name: (lambda f=function: f(inputs=inputs))
                         for name, function in functions.items()}
                outputs = {name: call()["translations"].numpy().tolist()
                           for name, call in calls.items()}
                if args.baseline:  # the same weights and search: the same translations
                    assert outputs["baseline"] == outputs["default"], (search, batch)
                assert outputs["ngram"] != outputs["default"]  # the guard acted
                for guard in (0, args.no_repeat_ngram):
                    calls[f"ctranslate2-fp32-ngram{guard}"] = (
                        lambda g=guard: ct2.translate_batch(
                            [tokens] * batch, beam_size=beam_size, length_penalty=0.6,
                            max_decoding_length=OUTPUT_TOKENS, no_repeat_ngram_size=g,
                            **TRANSLATE_OPTIONS))
                reps = args.reps * 2 if batch == 1 else args.reps
                baseline = calls.pop("baseline", None)
                timings = shuffled_all(calls, reps, args.budget)
                ms = {name: timing["median_ms"] for name, timing in timings.items()}
                if baseline is not None:  # on their own: no CTranslate2 threads beside them
                    alone = shuffled_all({"default": calls["default"], "baseline": baseline},
                                         reps, args.budget)
                    ms["default_alone"] = alone["default"]["median_ms"]
                    ms["baseline"] = alone["baseline"]["median_ms"]
                guarded = f"ctranslate2-fp32-ngram{args.no_repeat_ngram}"
                row = {"search": search, "batch": batch, **{f"{k}_ms": v for k, v in ms.items()},
                       "ngram_over_default": round(ms["ngram"] / ms["default"], 3),
                       "ctranslate2_ngram_over_default": round(
                           ms[guarded] / ms["ctranslate2-fp32-ngram0"], 3),
                       "over_ctranslate2_fp32": {
                           "default": round(ms["default"] / ms["ctranslate2-fp32-ngram0"], 2),
                           "ngram": round(ms["ngram"] / ms[guarded], 2)},
                       "runs": timings["default"]["runs"]}
                if args.baseline:
                    row["default_over_baseline"] = round(ms["default_alone"] / ms["baseline"], 3)
                results["rows"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

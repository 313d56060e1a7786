"""Whole documents from a file: `tfformer-translate --document --input FILE --output FILE` on a
1,000-line file (paragraphs of 1-3 sentences, a blank line every tenth), against the same
sentences one per line through the default signature (`--input` without `--document`). JSON on
stdout.

    .venv/bin/python benchmarks/serving/documents.py > benchmarks/results/documents.json

The model: decode.py's random tiny model (vocabulary 4000), exported with the default beam 4
and max_output_extra 8, so every translation is its source's pieces + 8 long (EOS never wins) in
both modes. Each command runs in its own process, in process with `--saved-model`; its wall
time includes Python's and TensorFlow's start-up and the SavedModel's load, which
`startup_seconds` (the same command on a one-line file) measures. sentences/s counts the
non-empty sentences.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "decoding"))

from common import BIN, cpu_model, logger  # noqa: E402
from decode import build  # noqa: E402

log = logger("documents")


def documents(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """`count` lines (paragraphs of 1-3 built-in sentences, every tenth blank) and their
    sentences in order."""
    from tfformer.data.builtin import builtin_pairs

    sources = [source for source, _ in builtin_pairs("train", n=3 * count)]
    rng = random.Random(seed)
    lines, sentences = [], []
    for index in range(count):
        if index % 10 == 9:
            lines.append("")
            continue
        paragraph = [sources.pop() for _ in range(rng.randint(1, 3))]
        lines.append(" ".join(paragraph))
        sentences.extend(paragraph)
    return lines, sentences


def timed_command(*command: str) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr[-2000:]}")
    return seconds, result.stderr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32, help="lines per call")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.decode.translator import Translator
    from tfformer.export.saved_model import export_saved_model
    from tfformer.utils.cpu import matmul_flags

    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    model, _ = build("tiny", tokenizer)
    lines, sentences = documents(args.lines)
    translate = os.path.join(BIN, "tfformer-translate")
    results = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "cpu_flags": matmul_flags(),
               "tensorflow": tf.__version__, "lines": len(lines), "sentences": len(sentences),
               "batch_size": args.batch_size, "rows": []}
    with tempfile.TemporaryDirectory() as work:
        path = export_saved_model(Translator(model, tokenizer, max_output_extra=8), work,
                                  "tfformer", 1)
        inputs = {"document": os.path.join(work, "documents.txt"),
                  "sentences": os.path.join(work, "sentences.txt"),
                  "one": os.path.join(work, "one.txt")}
        for name, content in (("document", lines), ("sentences", sentences),
                              ("one", sentences[:1])):
            with open(inputs[name], "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in content))
        startup, _ = timed_command(translate, "--saved-model", path, "--input", inputs["one"],
                                   "--output", os.path.join(work, "one.out"))
        results["startup_seconds"] = round(startup, 2)
        for mode, flags in (("document", ["--document"]), ("sentences", [])):
            out = os.path.join(work, f"{mode}.out")
            seconds, stderr = timed_command(translate, "--saved-model", path, *flags,
                                            "--input", inputs[mode], "--output", out,
                                            "--batch-size", str(args.batch_size))
            with open(out, encoding="utf-8") as f:
                written = f.read().split("\n")[:-1]
            row = {"mode": mode, "input_lines": len(lines if mode == "document" else sentences),
                   "output_lines": len(written), "seconds": round(seconds, 2),
                   "sentences_per_s": round(len(sentences) / seconds, 1),
                   "sentences_per_s_after_startup": round(len(sentences)
                                                          / (seconds - startup), 1),
                   "progress_line": re.split(r"[\r\n]", stderr.strip())[-1]}
            log(json.dumps(row))
            results["rows"].append(row)
    document, alone = results["rows"]
    results["document_over_sentences_time"] = round(document["seconds"] / alone["seconds"], 2)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

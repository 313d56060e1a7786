"""tfformer-export: write a training run as a SavedModel in the layout TF Serving watches, or as
a CTranslate2 model directory.

    tfformer-export RUN_DIR --model-base-path models --name tfformer --version 1

writes models/tfformer/1/{saved_model.pb, variables/, assets/}, then checks that every op is
one stock TF Serving has and that a fresh process (tensorflow + tensorflow_text only) translates
sample sentences exactly as the in-memory Translator does. A failed check exits 1 and leaves
no version directory behind for TF Serving to load; bad input (no such run, a version that
exists, a bad value) exits 2.

    tfformer-export RUN_DIR --format ctranslate2 --out ct2-model [--quantization int8]

writes ct2-model/{model.bin, config.json, shared_vocabulary.json, tokenizer.model} for
CTranslate2 (pip install ctranslate2), checked to load and, with float32 weights, to reproduce
the model's log-probabilities (see tfformer.export.ctranslate2); same exit codes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tfformer.cli.console import (
    DefaultsOnceFormatter,
    exit_status,
    import_tensorflow,
    start_logging,
)
from tfformer.config import LENGTH_PENALTY_FORMS, DecodingConfig
from tfformer.export.ctranslate2 import QUANTIZATIONS
from tfformer.model.precision import INFERENCE_PRECISIONS

logger = logging.getLogger("tfformer.cli.export")

SAVED_MODEL_ONLY = ("version", "beam_size", "length_penalty", "length_penalty_form",
                    "max_output_extra", "no_repeat_ngram", "precision")
CTRANSLATE2_ONLY = ("out", "quantization", "weights")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfformer-export", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsOnceFormatter)
    parser.add_argument("run_dir", help="training run dir holding model.keras + tokenizer.model")
    parser.add_argument("--format", choices=("savedmodel", "ctranslate2"), default="savedmodel",
                        help="a SavedModel for TF Serving, or a CTranslate2 model directory")
    parser.add_argument("--model-base-path", default="models")
    parser.add_argument("--name", default="tfformer")
    parser.add_argument("--version", type=int, default=None,
                        help="version number (default: one above the highest present)")
    parser.add_argument("--beam-size", type=int, default=None,
                        help="1 = greedy (default: 4, as in the paper)")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help=f"alpha (default: {DecodingConfig.length_penalty}, as in the paper)")
    parser.add_argument("--length-penalty-form", choices=LENGTH_PENALTY_FORMS, default=None,
                        help="gnmt: ((5 + |Y|) / 6) ** alpha, the paper's (default); power: "
                             "|Y| ** alpha, as Hugging Face's generate (an imported OPUS-MT "
                             "model ranks as there)")
    parser.add_argument("--max-output-extra", type=int, default=None,
                        help="maximum output length = input length + this (default: 50)")
    parser.add_argument("--no-repeat-ngram", type=int, default=None, metavar="N",
                        help="forbid repeating any n-gram of N pieces in a translation, in "
                             "every signature (default: 0, off: the paper's search)")
    parser.add_argument("--precision", choices=INFERENCE_PRECISIONS, default=None,
                        help="of the weights and matmuls: bf16 stores and multiplies them in "
                             "bfloat16 (LayerNorm, softmax and scores stay float32); it pays "
                             "off on CPUs with AVX512_BF16 or AMX (default: fp32)")
    parser.add_argument("--check-sentences", default=None,
                        help="file of sentences (one per line) for the fresh-process check; "
                             "default: the run's dev sources (RUN_DIR/dev_sources.txt, written "
                             "by tfformer-train), else a few fixed Spanish sentences")
    parser.add_argument("--out", default=None,
                        help="ctranslate2: the model directory to write (new or empty)")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="ctranslate2: weight type (default: none, float32 weights)")
    parser.add_argument("--weights", default=None,
                        help="ctranslate2: a .keras or .weights.h5 file of the run (default: "
                             "model.keras, else the last checkpoint)")
    args = parser.parse_args(argv)
    wrong = SAVED_MODEL_ONLY if args.format == "ctranslate2" else CTRANSLATE2_ONLY
    given = [f"--{name.replace('_', '-')}" for name in wrong if getattr(args, name) is not None]
    if given:
        parser.error(f"--format {args.format} does not take {', '.join(given)}")
    if args.format == "ctranslate2" and args.out is None:
        parser.error("--format ctranslate2 needs --out DIR")
    return args


def export_ctranslate2(args: argparse.Namespace) -> dict:
    from tfformer.export.ctranslate2 import export_ctranslate2

    sentences = None
    if args.check_sentences is not None:
        with open(args.check_sentences, encoding="utf-8") as f:
            sentences = [line.rstrip("\n") for line in f]
    result = export_ctranslate2(args.run_dir, args.out, quantization=args.quantization,
                                weights=args.weights, check_sentences=sentences)
    return {"export_dir": result.path, "weights": result.weights,
            "quantization": result.quantization,
            "max_log_prob_difference": result.max_log_prob_difference}


def main(argv=None) -> int:
    args = parse_args(argv)
    start_logging()
    import_tensorflow()
    from tfformer import run
    from tfformer.export.ctranslate2 import CTranslate2ExportError
    from tfformer.export.saved_model import ExportError

    def export() -> None:
        if args.format == "ctranslate2":
            report = export_ctranslate2(args)
        else:
            result = run.export(args.run_dir, args.model_base_path, args.name, args.version,
                                beam_size=args.beam_size, length_penalty=args.length_penalty,
                                max_output_extra=args.max_output_extra,
                                no_repeat_ngram=args.no_repeat_ngram,
                                length_penalty_form=args.length_penalty_form,
                                check_sentences=args.check_sentences,
                                precision=args.precision or "fp32")
            report = {"export_dir": result.export_dir, "version": result.version,
                      "precision": result.precision, "check_sentences": result.check_sentences}
        print(json.dumps(report))

    return exit_status(export, logger, refused=(FileNotFoundError, FileExistsError, ValueError),
                       failed=(ExportError, CTranslate2ExportError))  # its own checks failed


if __name__ == "__main__":
    sys.exit(main())

"""tfformer-export: write a training run as a SavedModel in the layout TF Serving watches.

    tfformer-export RUN_DIR --model-base-path models --name tfformer --version 1

writes models/tfformer/1/{saved_model.pb, variables/, assets/}, then checks that every op is
one stock TF Serving has and that a fresh process (tensorflow + tensorflow_text only) translates
sample sentences exactly as the in-memory Translator does. A failed check exits 1 and leaves
no version directory behind for TF Serving to load; bad input (no such run, a version that
exists, a bad value) exits 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tfformer.cli.console import DefaultsOnceFormatter, start_logging

logger = logging.getLogger("tfformer.cli.export")

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfformer-export", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsOnceFormatter)
    parser.add_argument("run_dir", help="training run dir holding model.keras + tokenizer.model")
    parser.add_argument("--model-base-path", default="models")
    parser.add_argument("--name", default="tfformer")
    parser.add_argument("--version", type=int, default=None,
                        help="version number (default: one above the highest present)")
    parser.add_argument("--beam-size", type=int, default=None,
                        help="1 = greedy (default: 4, as in the paper)")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="alpha (default: 0.6, as in the paper)")
    parser.add_argument("--max-output-extra", type=int, default=None,
                        help="maximum output length = input length + this (default: 50)")
    parser.add_argument("--check-sentences", default=None,
                        help="file of sentences (one per line) for the fresh-process check; "
                             "default: the run's dev sources (RUN_DIR/dev_sources.txt, written "
                             "by tfformer-train), else a few fixed Spanish sentences")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_logging()
    from tfformer import run
    from tfformer.export import ExportError

    try:
        result = run.export(args.run_dir, args.model_base_path, args.name, args.version,
                            beam_size=args.beam_size, length_penalty=args.length_penalty,
                            max_output_extra=args.max_output_extra,
                            check_sentences=args.check_sentences)
    except (FileNotFoundError, FileExistsError, ValueError) as error:  # what was asked for
        logger.error("%s", error)
        return 2
    except ExportError as error:  # the export failed its own checks
        logger.error("%s", error)
        return 1
    print(json.dumps({"export_dir": result.export_dir, "version": result.version,
                      "check_sentences": result.check_sentences}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

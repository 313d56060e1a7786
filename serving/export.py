"""tfformer-export: write a training run as a SavedModel in the layout TF Serving watches.

    tfformer-export RUN_DIR --model-base-path models --name tfformer --version 1

writes models/tfformer/1/{saved_model.pb, variables/, assets/}, then checks that every op is
one stock TF Serving has and that a fresh process (tensorflow + tensorflow_text only) translates
sample sentences exactly as the in-memory Translator does. A failed check exits non-zero and
leaves no version directory behind for TF Serving to load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

logger = logging.getLogger("tfformer.export")

DEFAULT_SENTENCES = (
    "Los tres perros rojos comen manzanas verdes.",
    "Una hermana visita el puente azul.",
    "¿Dónde está la biblioteca?",
    "",
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfformer-export", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("run_dir", help="training run dir holding model.keras + tokenizer.model")
    parser.add_argument("--model-base-path", default="models")
    parser.add_argument("--name", default="tfformer")
    parser.add_argument("--version", type=int, default=None,
                        help="version number (default: one above the highest present)")
    parser.add_argument("--beam-size", type=int, default=None, help="1 = greedy (default: config)")
    parser.add_argument("--length-penalty", type=float, default=None)
    parser.add_argument("--check-sentences", default=None,
                        help="file of sentences (one per line) for the fresh-process check; "
                             "default: the run's dev sources (RUN_DIR/dev_sources.txt, written "
                             "by tfformer-train), else a few fixed Spanish sentences")
    return parser.parse_args(argv)


def next_version(model_base_path: str, name: str) -> int:
    directory = os.path.join(model_base_path, name)
    versions = [int(d) for d in os.listdir(directory) if d.isdigit()] \
        if os.path.isdir(directory) else []
    return max(versions, default=0) + 1


def check_sentences(path: str | None, run_dir: str) -> tuple[list[str], str]:
    """The sentences of the fresh-process check, and where they came from."""
    from tfformer.export import DEV_SOURCES_FILENAME

    run_sources = os.path.join(run_dir, DEV_SOURCES_FILENAME)
    if not path and os.path.exists(run_sources):
        path = run_sources
    if path:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f], path
    return list(DEFAULT_SENTENCES), "built-in examples"


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfformer.export import ExportError, export_saved_model, load_translator

    try:
        translator = load_translator(args.run_dir, beam_size=args.beam_size,
                                     length_penalty=args.length_penalty)
        version = args.version or next_version(args.model_base_path, args.name)
        sentences, origin = check_sentences(args.check_sentences, args.run_dir)
        path = export_saved_model(translator, args.model_base_path, args.name, version,
                                  check_sentences=sentences)
    except (ExportError, FileNotFoundError, FileExistsError, ValueError) as error:
        logger.error("%s", error)
        return 1
    logger.info("exported %s; it translates %d check sentences (%s) in a fresh process exactly "
                "as in memory", path, len(sentences), origin)
    print(json.dumps({"export_dir": path, "version": version, "check_sentences": origin}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

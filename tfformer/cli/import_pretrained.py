"""tfformer-import: a Hugging Face Marian (OPUS-MT) directory as a tfformer run directory.

    huggingface-cli download Helsinki-NLP/opus-mt-es-en --local-dir opus-mt-es-en
    tfformer-import opus-mt-es-en --out runs/opus-es-en
    tfformer-export runs/opus-es-en --model-base-path models --name opus-es-en

The run directory holds config.json, model.keras, vocabulary.json, source.spm, target.spm and
pretrained.json (where it came from); tfformer-evaluate, -export (SavedModel or
--format ctranslate2) and -serve take it as any run. Progress goes to stdout, then the result
as one JSON line. Exit 0; 2 for bad input (a missing file, a field tfformer does not support,
an --out that is not empty), naming it; 1 when writing fails (disk, permissions).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tfformer.cli.console import DefaultsOnceFormatter, import_tensorflow, start_logging

logger = logging.getLogger("tfformer.cli.import")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tfformer-import", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsOnceFormatter)
    parser.add_argument("directory", help="a Hugging Face Marian directory (config.json, "
                                          "model.safetensors or pytorch_model.bin, source.spm, "
                                          "target.spm, vocab.json)")
    parser.add_argument("--out", required=True, metavar="RUN",
                        help="the run directory to write (new or empty)")
    args = parser.parse_args(argv)
    start_logging()
    import_tensorflow()
    from tfformer import run

    def progress(line: str) -> None:
        print(f"tfformer-import: {line}", flush=True)

    try:
        result = run.import_pretrained(args.directory, args.out, progress=progress)
    except (FileNotFoundError, FileExistsError, ValueError) as error:  # what was asked for
        logger.error("%s", error)
        return 2
    except OSError as error:  # writing failed: the path is in the error
        logger.error("%s", error)
        return 1
    print(json.dumps({"run_dir": result.run_dir, "weights": result.weights,
                      "seconds": round(result.seconds, 2),
                      "config": result.config.to_dict()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

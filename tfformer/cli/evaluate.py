"""tfformer-evaluate: score a run or an exported SavedModel on a test set (sacreBLEU BLEU, chrF).

    tfformer-evaluate runs/bible --data test.tsv --beam-size 4 --out eval/
    tfformer-evaluate runs/bible --average 5 --src test.es --ref test.en
    tfformer-evaluate models/tfformer --data test.tsv          # the exported model, as exported

Writes OUT/hypotheses.txt (one per input line, in order) and OUT/report.json (scores with their
sacreBLEU signatures, the model and the search), and prints the report.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from tfformer.cli.console import (
    DefaultsOnceFormatter,
    exit_status,
    import_tensorflow,
    start_logging,
)
from tfformer.config import DecodingConfig

logger = logging.getLogger("tfformer.cli.evaluate")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfformer-evaluate", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsOnceFormatter)
    parser.add_argument("model", help="a run dir, a SavedModel version dir or a model base path")
    parser.add_argument("--data", default=None,
                        help="test set: a source<TAB>reference TSV file (FILE or tsv:FILE), or "
                             "prepared:DIR (a tfformer-prepare store's dev set)")
    parser.add_argument("--src", default=None, help="source sentences, one per line")
    parser.add_argument("--ref", default=None, help="reference translations, one per line")
    parser.add_argument("--checkpoint", default=None, help="a run's .weights.h5 to evaluate")
    parser.add_argument("--average", type=int, default=None, metavar="K",
                        help="evaluate the average of the run's last K checkpoints (§6.1)")
    parser.add_argument("--beam-size", type=int, default=None, help="1 = greedy (default 4)")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help=f"alpha (default {DecodingConfig.length_penalty})")
    parser.add_argument("--max-output-extra", type=int, default=None,
                        help="output tokens allowed beyond the source's length (default 50)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per call")
    parser.add_argument("--out", default=None, help="directory for hypotheses.txt + report.json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_logging()
    import_tensorflow()
    from tfformer.data.errors import DataError
    from tfformer.evaluate import (
        load_translate_batch,
        read_test_set,
        score,
        translate_in_length_order,
    )
    from tfformer.utils.files import atomic_write_text

    def evaluate() -> None:
        if args.out:  # before the decoding, which an unwritable --out would waste
            check_writable(args.out)
        sources, references, test_set = read_test_set(args.data, args.src, args.ref)
        translate, model = load_translate_batch(
            args.model, checkpoint=args.checkpoint, average=args.average,
            beam_size=args.beam_size, length_penalty=args.length_penalty,
            max_output_extra=args.max_output_extra)

        def progress(done: int) -> None:
            print(f"\r{done}/{len(sources)} sentences", end="", file=sys.stderr, flush=True)

        hypotheses = translate_in_length_order(translate, sources, args.batch_size, progress)
        print(file=sys.stderr)
        scores = score(hypotheses, references)
        report = {"test_set": test_set, **model, "bleu": round(scores.bleu, 2),
                  "chrf": round(scores.chrf, 2), "bleu_signature": scores.bleu_signature,
                  "chrf_signature": scores.chrf_signature, "sentences": scores.sentences}
        # Printed before --out is written: a failed write does not lose the decoding.
        print(json.dumps(report, ensure_ascii=False))
        if args.out:
            atomic_write_text(os.path.join(args.out, "hypotheses.txt"),
                              "".join(h.replace("\n", " ") + "\n" for h in hypotheses))
            atomic_write_text(os.path.join(args.out, "report.json"),
                              json.dumps(report, indent=2, ensure_ascii=False) + "\n")

    return exit_status(evaluate, logger, refused=(DataError, ValueError, FileNotFoundError))


def check_writable(directory: str) -> None:
    """Creates `directory` and writes a file there, or raises the OSError that names it."""
    from tfformer.utils.files import atomic_write_text

    os.makedirs(directory, exist_ok=True)
    probe = os.path.join(directory, ".tfformer-evaluate-probe")
    atomic_write_text(probe, "")
    os.remove(probe)


if __name__ == "__main__":
    sys.exit(main())

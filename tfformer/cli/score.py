"""tfformer-score: score given translations with a run or an exported SavedModel: log P(target |
source) by teacher forcing, one line per pair, in input order (reranking, quality estimation,
filtering a crawled corpus).

    tfformer-score runs/bible --data pairs.tsv > scores.txt
    tfformer-score models/tfformer --src crawl.es --tgt crawl.en --normalize --output scores.txt

Each line is the pair's log P (with --normalize: that / |Y|, the mean per token, EOS counted);
--token-scores adds a tab and each piece's log-probability, EOS's last. A run directory is
scored on any Keras backend, a SavedModel through its `score` signature.

Exit status: 0; 2 for bad input (a malformed TSV line, files of different lengths, a target
longer than the model scores); 1 when a file cannot be written at run time.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tfformer.cli.console import (
    DefaultsOnceFormatter,
    exit_status,
    import_tensorflow,
    start_logging,
)
from tfformer.cli.evaluate import check_writable

logger = logging.getLogger("tfformer.cli.score")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfformer-score", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsOnceFormatter)
    parser.add_argument("model", help="a run dir, a SavedModel version dir or a model base path")
    parser.add_argument("--data", default=None,
                        help="pairs: a source<TAB>target TSV file (FILE or tsv:FILE)")
    parser.add_argument("--src", default=None, help="source sentences, one per line")
    parser.add_argument("--tgt", default=None, help="their translations, one per line")
    parser.add_argument("--normalize", action="store_true",
                        help="write log P / |Y| (the mean per token) instead of log P")
    parser.add_argument("--token-scores", action="store_true",
                        help="add a tab and the log-probability of each piece and of EOS")
    parser.add_argument("--batch-size", type=int, default=32, help="pairs per call")
    parser.add_argument("--output", default=None,
                        help="write the scores to this file (written whole, once all are "
                             "scored) instead of stdout")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_logging()
    import_tensorflow()
    from tfformer.data.errors import DataError
    from tfformer.evaluate import load_scorer, read_test_set, translate_in_length_order
    from tfformer.utils.files import atomic_write_text

    asked = (DataError, ValueError, FileNotFoundError)
    refused: tuple[type[Exception], ...] = asked
    try:
        import tensorflow as tf

        refused += (tf.errors.InvalidArgumentError,)  # a target over the graph's limit
    except ImportError:
        pass

    def score_pairs() -> None:
        if args.output:  # before the scoring, which an unwritable --output would waste
            check_writable(os.path.dirname(os.path.abspath(args.output)))
        sources, targets, _ = read_test_set(args.data, args.src, args.tgt)
        score = load_scorer(args.model)
        pairs = list(zip(sources, targets))
        shown = len(pairs) > args.batch_size  # a progress line only where there are batches

        def progress(done: int) -> None:
            if shown:
                print(f"\r{done}/{len(pairs)} pairs", end="", file=sys.stderr, flush=True)

        scored = translate_in_length_order(score, pairs, args.batch_size, progress,
                                           length=lambda pair: len(pair[0]) + len(pair[1]))
        if shown:
            print(file=sys.stderr)
        lines = []
        for total, normalized, token_scores in scored:
            line = f"{normalized if args.normalize else total:.6f}"
            if args.token_scores:
                line += "\t" + " ".join(f"{value:.6f}" for value in token_scores)
            lines.append(line + "\n")
        if args.output:
            atomic_write_text(args.output, "".join(lines))
        else:
            sys.stdout.write("".join(lines))

    def describe(error: BaseException) -> str:
        message = str(error)
        if not isinstance(error, asked):  # the graph's
            from tfformer.serving.requests import op_error_message

            message = f"INVALID_ARGUMENT: {op_error_message(error)}"
        return message.split("\n")[0]

    return exit_status(score_pairs, logger, refused=refused, describe=describe)


if __name__ == "__main__":
    sys.exit(main())

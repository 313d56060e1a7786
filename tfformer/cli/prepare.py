"""tfformer-prepare: read a corpus once into a prepared store that training reads on any backend.

    tfformer-prepare --data tsv:train.tsv.gz --out data/wmt --vocab-size 32000
    tfformer-train --data prepared:data/wmt --backend jax ...   # no TensorFlow needed there

Checks every line (file and line on the first bad one), learns the SentencePiece vocabulary from
a bounded sample (or takes --tokenizer), holds out the dev set (or reads DEV) and writes the
token ids of both sides, memory-mapped, with a manifest (`tfformer.data.store`). Preparing needs
TensorFlow (the corpus readers are tf.data's); training from the store does not.
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
from tfformer.train.settings import DEFAULT_VOCAB_SAMPLE, TrainSettings

logger = logging.getLogger("tfformer.cli.prepare")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfformer-prepare", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsOnceFormatter)
    data_help = TrainSettings.__dataclass_fields__["data"].metadata["help"]
    parser.add_argument("--data", required=True, help=data_help)
    parser.add_argument("--out", required=True, help="the store's directory (new)")
    parser.add_argument("--vocab-size", type=int, default=8000,
                        help="subword vocabulary size, a soft limit (without --tokenizer)")
    parser.add_argument("--vocab-sample", type=int, default=DEFAULT_VOCAB_SAMPLE,
                        metavar="SENTENCES", help="sentences the vocabulary learns from")
    parser.add_argument("--tokenizer", default=None, metavar="FILE",
                        help="a SentencePiece .model to use instead of learning one (e.g. an "
                             "earlier run's tokenizer.model)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the held-out dev set's and the vocabulary sample's seed")
    parser.add_argument("--skip-bad-lines", action="store_true",
                        help="skip (and count) malformed lines instead of failing")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_logging()
    import_tensorflow()
    from tfformer.data.errors import DataError
    from tfformer.train.prepare import prepare_store

    def prepare() -> None:
        prepared = prepare_store(args.data, args.out, vocab_size=args.vocab_size,
                                 vocab_sample=args.vocab_sample, tokenizer=args.tokenizer,
                                 seed=args.seed, skip_bad_lines=args.skip_bad_lines)
        print(json.dumps({"store": prepared.path, **prepared.manifest}))

    return exit_status(prepare, logger,
                       refused=(DataError, ValueError, FileNotFoundError, FileExistsError))


if __name__ == "__main__":
    sys.exit(main())

"""tfformer-average: average the weights of a run's last K checkpoints (paper §6.1).

    tfformer-average runs/base --last 5        # writes runs/base/model-avg5.keras

The result is a `.keras` model like the run's model.keras; export it by pointing
tfformer-export at a run dir whose model.keras it is (or pass --out RUN_DIR/model.keras).
A run without checkpoints, or with fewer than K, exits 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tfformer.cli.console import exit_status, import_tensorflow, start_logging

logger = logging.getLogger("tfformer.average")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tfformer-average", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--last", type=int, default=5, metavar="K")
    parser.add_argument("--out", default=None,
                        help="output .keras file (default: RUN_DIR/model-avgK.keras)")
    args = parser.parse_args(argv)
    start_logging()
    if args.last < 1:
        parser.error("--last must be >= 1")

    import_tensorflow()
    from tfformer import run

    return exit_status(lambda: run.average(args.run_dir, last=args.last, out=args.out), logger,
                       refused=(FileNotFoundError, ValueError))  # no such run, too few


if __name__ == "__main__":
    sys.exit(main())

"""tfformer-serve: serve a model base path over TF Serving's gRPC API, and its REST API with
--rest-api-port (a local stand-in for tensorflow_model_server), until SIGTERM or SIGINT.

Exit status: 2 for bad input (a flag out of range, no such model base path); 1 when serving
fails at run time (no version loads, the port is taken)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Optional, Sequence

from tfformer.cli.console import import_tensorflow, start_logging
from tfformer.serving.defaults import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_HOST,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_INPUT_CHARS,
    DEFAULT_POLL_SECONDS,
    DEFAULT_PORT,
    DEFAULT_REST_API_PORT,
    DEFAULT_WORKERS,
)

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfformer-serve",
        description="Serve a TF Serving model base path over TF Serving's gRPC PredictionService, "
                    "and its REST API with --rest-api-port (a local stand-in for "
                    "tensorflow_model_server).")
    parser.add_argument("--model-base-path", required=True, metavar="DIR",
                        help="the BASE/NAME directory holding integer version subdirectories")
    parser.add_argument("--model-name", metavar="NAME",
                        help="model name clients send in ModelSpec.name (default: the last "
                             "component of --model-base-path)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="gRPC port; 0 picks a free one, printed at start "
                             "(default %(default)s)")
    parser.add_argument("--rest-api-port", type=int, default=DEFAULT_REST_API_PORT,
                        metavar="PORT",
                        help="also serve TF Serving's REST API (POST /v1/models/NAME:predict, "
                             "GET /v1/models/NAME[/metadata]) on this port; 0 turns it off "
                             "(default %(default)s)")
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_SECONDS,
                        help="how often to look for a new version; 0 disables "
                             "(default %(default)s)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help="RPC worker threads (default %(default)s)")
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                        help="largest batch accepted by Predict (default %(default)s)")
    parser.add_argument("--max-input-chars", type=int, default=DEFAULT_MAX_INPUT_CHARS,
                        help="longest input string, in characters (default %(default)s)")
    parser.add_argument("--enable-batching", action="store_true",
                        help="merge concurrent Predict calls of a signature on dimension 0, as "
                             "TF Serving's --enable_batching does")
    parser.add_argument("--batching-parameters-file", metavar="FILE",
                        help="TF Serving's text-format BatchingParameters (max_batch_size, "
                             "batch_timeout_micros, max_enqueued_batches, num_batch_threads, "
                             "allowed_batch_sizes, pad_variable_length_inputs); with "
                             "--enable-batching (default: TF Serving's defaults)")
    # TF Serving's --tensorflow_intra_op_parallelism / --tensorflow_inter_op_parallelism.
    for pool, what in (("intra", "threads one op may use"),
                       ("inter", "ops run at once")):
        parser.add_argument(f"--tensorflow-{pool}-op-parallelism", type=int, default=0,
                            metavar="N",
                            help=f"TensorFlow's {pool}-op thread pool: {what}; 0 leaves "
                                 f"TensorFlow's default (TF_NUM_{pool.upper()}OP_THREADS, else "
                                 "one per core). One each decodes a small model at batch 1 "
                                 "faster (docs/deployment.md#threads)")
    parser.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS,
                        help="on SIGTERM/SIGINT, time given to in-flight RPCs "
                             "(default %(default)s)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging level (default %(default)s)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    start_logging(args.log_level, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    for flag, value in (("--workers", args.workers), ("--max-batch-size", args.max_batch_size),
                        ("--max-input-chars", args.max_input_chars)):
        if value < 1:
            logger.error("%s must be at least 1, got %d", flag, value)
            return 2
    for flag, value in (("--tensorflow-intra-op-parallelism",
                         args.tensorflow_intra_op_parallelism),
                        ("--tensorflow-inter-op-parallelism",
                         args.tensorflow_inter_op_parallelism)):
        if value < 0:
            logger.error("%s must be 0 (TensorFlow's default) or more, got %d", flag, value)
            return 2
    if args.batching_parameters_file and not args.enable_batching:
        logger.error("--batching-parameters-file needs --enable-batching")
        return 2
    if not 0 <= args.port <= 65535:
        logger.error("--port must be a port number (0: a free one), got %d", args.port)
        return 2
    if not 0 <= args.rest_api_port <= 65535:
        logger.error("--rest-api-port must be a port number (0: off), got %d", args.rest_api_port)
        return 2
    # Handlers first: a client that sends SIGTERM as soon as it reads "listening on" must get a
    # clean stop (exit 0), not the default handler's death.
    stop = threading.Event()

    def on_signal(signum, _frame):
        logger.info("Received %s: stopping (grace %.1f s)", signal.Signals(signum).name,
                    args.grace_seconds)
        stop.set()

    previous = {signum: signal.signal(signum, on_signal)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _serve(args, stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _serve(args: argparse.Namespace, stop: threading.Event) -> int:
    """Starts the servers, prints where they listen, serves until `stop`; the exit status."""
    import_tensorflow()
    import tensorflow as tf

    # Before the first op, which creates the pools.
    if args.tensorflow_intra_op_parallelism:
        tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)
    if args.tensorflow_inter_op_parallelism:
        tf.config.threading.set_inter_op_parallelism_threads(args.tensorflow_inter_op_parallelism)
    logger.info("TensorFlow thread pools: intra-op %d, inter-op %d (0: TensorFlow's default)",
                tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads())
    from tfformer.serving.batching import BatchingParameters
    from tfformer.serving.server import start_server  # TensorFlow: not for --help

    batching = None
    if args.enable_batching:
        try:
            batching = (BatchingParameters.from_file(args.batching_parameters_file)
                        if args.batching_parameters_file else BatchingParameters())
        except (OSError, ValueError) as error:
            logger.error("%s", error)
            return 2
    try:
        handle = start_server(
            args.model_base_path, args.model_name, args.host, args.port,
            poll_seconds=args.poll_seconds, workers=args.workers,
            max_batch_size=args.max_batch_size, max_input_chars=args.max_input_chars,
            rest_api_port=args.rest_api_port or None, batching=batching)
    except FileNotFoundError as error:
        logger.error("%s", error)
        return 2
    except (OSError, RuntimeError) as error:
        logger.error("%s", error)
        return 1
    print(f"tfformer-serve: model {handle.manager.name!r} listening on {handle.address}",
          flush=True)
    if handle.rest_address:
        print(f"tfformer-serve: REST API listening on {handle.rest_address}", flush=True)
    while not stop.wait(0.5):
        pass
    handle.stop(grace=args.grace_seconds)
    logger.info("Server stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

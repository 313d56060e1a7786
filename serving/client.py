"""Translate with the exported tfformer model: over TF Serving's gRPC API, or in process.

``translate()`` speaks the official ``tensorflow.serving.PredictionService`` protocol, so it works
unchanged against ``tensorflow_model_server`` and against ``serving.server`` (the local stand-in).
``translate_saved_model()`` calls the SavedModel's signature in this process instead.

The ``tfformer-translate`` command wraps both: sentences come from its arguments or, when there are
none, one per line from stdin; translations go to stdout one per line, in order.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from typing import Any, Iterable, Iterator, Optional, Sequence

import grpc
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

logger = logging.getLogger(__name__)

DEFAULT_SERVER = "127.0.0.1:8500"
DEFAULT_MODEL = "tfformer"
DEFAULT_SIGNATURE = "serving_default"
DEFAULT_TIMEOUT = 10.0
DEFAULT_BATCH_SIZE = 32  # at most the local server's default --max-batch-size (64)
INPUT_NAME = "inputs"
OUTPUT_TRANSLATIONS = "translations"
OUTPUT_SCORES = "scores"


@dataclasses.dataclass(frozen=True)
class Translation:
    text: str
    score: float


class TranslationError(RuntimeError):
    """A failed translation request: ``code`` is the gRPC status code (None for a response that
    does not fit the model's contract), ``details`` the server's message."""

    def __init__(self, code: Optional[grpc.StatusCode], details: str, server: Optional[str] = None):
        where = f" from {server}" if server else ""
        super().__init__(f"{code.name if code else 'BAD_RESPONSE'}{where}: {details}")
        self.code = code
        self.details = details
        self.server = server


def _check_sentences(sentences: Sequence[str]) -> list[str]:
    if isinstance(sentences, (str, bytes)):
        raise TypeError("sentences must be a sequence of str, not a single string")
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{index}] is {type(sentence).__name__}, not str")
    return sentences


def _batches(items: Sequence[str], batch_size: int) -> Iterator[Sequence[str]]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    for start in range(0, len(items), batch_size):
        yield items[start:start + batch_size]


def _decode(texts: Iterable[Any], scores: Iterable[Any]) -> list[Translation]:
    return [Translation(t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t),
                        float(s)) for t, s in zip(texts, scores, strict=True)]


def make_predict_request(sentences: Sequence[str], model: str = DEFAULT_MODEL,
                         signature: str = DEFAULT_SIGNATURE,
                         version: Optional[int] = None) -> predict_pb2.PredictRequest:
    """The PredictRequest TF Serving expects for a batch of sentences."""
    import tensorflow as tf

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[INPUT_NAME].CopyFrom(
        tf.make_tensor_proto([s.encode("utf-8") for s in sentences], dtype=tf.string,
                             shape=[len(sentences)]))
    request.output_filter.extend([OUTPUT_TRANSLATIONS, OUTPUT_SCORES])
    return request


def parse_predict_response(response: predict_pb2.PredictResponse, expected: int,
                           server: Optional[str] = None) -> list[Translation]:
    import tensorflow as tf

    arrays = {}
    for name in (OUTPUT_TRANSLATIONS, OUTPUT_SCORES):
        if name not in response.outputs:
            raise TranslationError(None, f"response has no output {name!r} "
                                         f"(outputs: {sorted(response.outputs)})", server)
        arrays[name] = tf.make_ndarray(response.outputs[name]).reshape(-1)
        if arrays[name].shape[0] != expected:
            raise TranslationError(None, f"output {name!r} has {arrays[name].shape[0]} values "
                                         f"for {expected} sentences", server)
    return _decode(arrays[OUTPUT_TRANSLATIONS], arrays[OUTPUT_SCORES])


def translate(
    sentences: Sequence[str],
    server: str = DEFAULT_SERVER,
    model: str = DEFAULT_MODEL,
    signature: str = DEFAULT_SIGNATURE,
    timeout: float = DEFAULT_TIMEOUT,
    channel: Optional[grpc.Channel] = None,
    *,
    version: Optional[int] = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[Translation]:
    """Translate ``sentences`` with a TF Serving (or ``serving.server``) model over gRPC.

    One Predict call per ``batch_size`` sentences, each with ``timeout`` seconds. ``channel`` is
    used (and left open) when given; otherwise a channel to ``server`` is opened and closed.
    ``version`` pins ``ModelSpec.version``. Raises ``TranslationError`` (with ``.code`` and
    ``.details``) on any gRPC error or a response that does not fit the model's contract.
    """
    sentences = _check_sentences(sentences)
    if not sentences:
        return []
    own_channel = channel is None
    target = server if own_channel else None  # a given channel may point anywhere
    if own_channel:
        channel = grpc.insecure_channel(server)
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        results: list[Translation] = []
        for batch in _batches(sentences, batch_size):
            request = make_predict_request(batch, model, signature, version)
            try:
                response = stub.Predict(request, timeout=timeout)
            except grpc.RpcError as error:
                raise TranslationError(error.code(), error.details() or "", target) from None
            results.extend(parse_predict_response(response, len(batch), target))
        return results
    finally:
        if own_channel:
            channel.close()


# --------------------------------------------------------------------------------------------
# In process


def resolve_saved_model_dir(path: str) -> str:
    """A SavedModel directory: ``path`` itself when it holds a saved_model.pb, else its highest
    integer version subdirectory (a TF Serving ``BASE/NAME`` directory)."""
    from serving.server import has_saved_model, list_versions

    if has_saved_model(path):
        return path
    versions = list_versions(path)
    if not versions:
        raise FileNotFoundError(f"{path}: neither a SavedModel directory nor a model base path "
                                f"with version subdirectories")
    return versions[max(versions)]


def load_saved_model(path: str) -> Any:
    """Load a SavedModel (version dir or ``BASE/NAME`` dir) after registering the tf-text ops."""
    import tensorflow as tf

    from serving.server import import_tensorflow_text

    import_tensorflow_text()
    return tf.saved_model.load(resolve_saved_model_dir(path))


def translate_saved_model(sentences: Sequence[str], saved_model: Any,
                          signature: str = DEFAULT_SIGNATURE,
                          batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """Translate in process with a loaded SavedModel (from ``load_saved_model``) or a path."""
    import tensorflow as tf

    sentences = _check_sentences(sentences)
    if isinstance(saved_model, (str, os.PathLike)):
        saved_model = load_saved_model(os.fspath(saved_model))
    if signature not in saved_model.signatures:
        raise KeyError(f"signature {signature!r} not in the SavedModel "
                       f"(has: {sorted(saved_model.signatures)})")
    function = saved_model.signatures[signature]
    results: list[Translation] = []
    for batch in _batches(sentences, batch_size):
        outputs = function(**{INPUT_NAME: tf.constant(list(batch), dtype=tf.string)})
        results.extend(_decode(outputs[OUTPUT_TRANSLATIONS].numpy(),
                               outputs[OUTPUT_SCORES].numpy()))
    return results


# --------------------------------------------------------------------------------------------
# CLI


def _stdin_lines() -> Iterator[str]:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (e.g. io.StringIO)
        for line in sys.stdin:
            yield line.rstrip("\r\n")
        return
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"stdin line {number} is not valid UTF-8 ({error.reason} at byte "
                             f"{error.start})") from None


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfformer-translate",
        description="Translate sentences with the tfformer model served by TF Serving (gRPC), or "
                    "in process with --saved-model. Without SENTENCE arguments, translates stdin "
                    "line by line; prints one translation per line, in order.")
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate")
    parser.add_argument("--server", default=DEFAULT_SERVER, metavar="HOST:PORT",
                        help="TF Serving gRPC address (default %(default)s)")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="model name on the server (default %(default)s)")
    parser.add_argument("--signature", default=DEFAULT_SIGNATURE,
                        help="signature to call (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="deadline of each request (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help="sentences per request (default %(default)s)")
    parser.add_argument("--scores", action="store_true",
                        help="print 'SCORE<TAB>TRANSLATION' instead of the translation alone")
    parser.add_argument("--saved-model", metavar="DIR",
                        help="translate in process with this SavedModel (a version dir, or a "
                             "model base path whose highest version is used) instead of a server")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    prog = parser.prog
    lines = iter(args.sentences) if args.sentences else _stdin_lines()

    channel = None
    try:
        if args.saved_model:
            model = load_saved_model(args.saved_model)

            def run(batch):
                return translate_saved_model(batch, model, args.signature, args.batch_size)
        else:
            channel = grpc.insecure_channel(args.server)

            def run(batch):
                return translate(batch, args.server, args.model, args.signature, args.timeout,
                                 channel, batch_size=args.batch_size)

        for batch in _chunks(lines, args.batch_size):
            for translation in run(batch):
                if args.scores:
                    print(f"{translation.score:.6g}\t{translation.text}")
                else:
                    print(translation.text)
            sys.stdout.flush()
    except TranslationError as error:
        code = error.code.name if error.code else "BAD_RESPONSE"
        where = "" if args.saved_model else f" from {args.server}"
        print(f"{prog}: error: {code}{where}: {error.details}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - e.g. tf.errors.OpError from the in-process model
        print(f"{prog}: error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        if channel is not None:
            channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

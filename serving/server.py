"""A local stand-in for TensorFlow Serving's gRPC API, for development and tests.

It serves one model from a TF Serving model base path (``BASE/NAME/VERSION/saved_model.pb``)
through the official ``tensorflow.serving.PredictionService`` (and ``ModelService.GetModelStatus``)
protos, so a client written against it works unchanged against ``tensorflow_model_server``:

* the highest integer version directory is loaded with ``tf.saved_model.load``; the base path is
  polled every ``--poll-seconds`` and a new version is loaded fully before it replaces the old one
  (a version that fails to load is logged and the old one keeps serving);
* ``Predict`` validates the request against the signature and answers with TF Serving's status
  codes and, where TF Serving has one, its wording; ``GetModelMetadata`` returns the
  ``SignatureDefMap`` read from ``saved_model.pb``; ``Classify``, ``Regress`` and
  ``MultiInference`` answer UNIMPLEMENTED.

Beyond TF Serving, it rejects empty batches, batches over ``--max-batch-size``, strings that are not
valid UTF-8 and strings over ``--max-input-chars`` characters, so a bad request costs no model time.

The server holds no model logic: it only loads the SavedModel and calls its signatures.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import signal
import sys
import threading
from concurrent import futures
from typing import Any, Mapping, Optional, Sequence

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
INIT_OP_SIGNATURE = "__saved_model_init_op"
SIGNATURE_DEF_FIELD = "signature_def"
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8500
DEFAULT_POLL_SECONDS = 1.0
DEFAULT_WORKERS = 8
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_MAX_INPUT_CHARS = 1000
DEFAULT_GRACE_SECONDS = 10.0

_VERSION_DIR = re.compile(r"[0-9]+")
# tf.errors codes are the canonical status codes, numbered like gRPC's.
_GRPC_CODE_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}
# TF Serving answers with values in the typed repeated fields (Tensor::AsProtoField), not in
# tensor_content; clients that read e.g. `outputs["scores"].float_val` depend on it.
_PROTO_FIELD_BY_DTYPE = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_INT32: "int_val",
    types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT8: "int_val",
    types_pb2.DT_UINT8: "int_val",
    types_pb2.DT_UINT16: "int_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val",
    types_pb2.DT_BOOL: "bool_val",
}


class ServingError(Exception):
    """A request failure, answered to the client as a gRPC status code and details."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


# --------------------------------------------------------------------------------------------
# Model base path and versions


def list_versions(model_base_path: str) -> dict[int, str]:
    """Version number -> directory, for the integer-named subdirectories holding a SavedModel.

    Like TF Serving's file system source, other names (e.g. a ``tmp`` dir being written before an
    atomic rename to its version number) are ignored.
    """
    try:
        names = os.listdir(model_base_path)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    versions = {}
    for name in names:
        path = os.path.join(model_base_path, name)
        if _VERSION_DIR.fullmatch(name) and has_saved_model(path):
            versions[int(name)] = path
    return versions


def has_saved_model(path: str) -> bool:
    """Whether `path` holds a saved_model.pb (or .pbtxt)."""
    return any(os.path.isfile(os.path.join(path, f)) for f in SAVED_MODEL_FILES)


def read_signature_defs(saved_model_dir: str) -> dict[str, meta_graph_pb2.SignatureDef]:
    """The SignatureDefs of the ``serve`` MetaGraph in ``saved_model.pb`` (or ``.pbtxt``)."""
    saved_model = saved_model_pb2.SavedModel()
    pb_path = os.path.join(saved_model_dir, "saved_model.pb")
    if os.path.isfile(pb_path):
        with open(pb_path, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(os.path.join(saved_model_dir, "saved_model.pbtxt"), encoding="utf-8") as f:
            text_format.Parse(f.read(), saved_model)
    if not saved_model.meta_graphs:
        raise ValueError(f"{saved_model_dir}: the SavedModel has no MetaGraph")
    meta_graph = next(
        (m for m in saved_model.meta_graphs if "serve" in m.meta_info_def.tags),
        saved_model.meta_graphs[0],
    )
    return {
        key: value
        for key, value in meta_graph.signature_def.items()
        if key != INIT_OP_SIGNATURE
    }


def import_tensorflow_text() -> None:
    """Register the tf-text ops (SentencePiece...) the tfformer SavedModel needs before loading."""
    try:
        import tensorflow_text  # noqa: F401  (imported for its op registrations)
    except ImportError as error:  # the stand-in models of the tests do not need it
        logger.warning("tensorflow_text is not importable (%s); models using its ops will fail "
                       "to load", error)


@dataclasses.dataclass(frozen=True)
class LoadedVersion:
    """One loaded version of the model: what a request needs, captured at once."""

    version: int
    path: str
    signatures: Mapping[str, Any]  # signature key -> ConcreteFunction
    signature_defs: Mapping[str, meta_graph_pb2.SignatureDef]  # without __saved_model_init_op
    saved_model: Any = dataclasses.field(repr=False)  # keeps the loaded object alive


def load_version(path: str, version: int) -> LoadedVersion:
    """Load one version directory completely (raises on any failure)."""
    signature_defs = read_signature_defs(path)
    loaded = tf.saved_model.load(path)
    signatures = dict(loaded.signatures)
    if not signatures:
        raise ValueError(f"{path}: the SavedModel has no serving signatures")
    return LoadedVersion(version, path, signatures, signature_defs, loaded)


def _fingerprint(path: str) -> tuple:
    """Cheap identity of a version directory's content, to retry a failed load once it changes."""
    entries = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            entries.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(entries))


class ModelVersionManager:
    """Keeps the highest version of one model loaded, polling its base path for new versions.

    ``current`` is swapped by a single reference assignment, so a request that read it keeps a
    consistent version to the end while the next request sees the new one.
    """

    def __init__(self, name: str, base_path: str, poll_seconds: float = DEFAULT_POLL_SECONDS):
        self.name = name
        self.base_path = os.path.abspath(base_path)
        self.poll_seconds = poll_seconds
        self._current: Optional[LoadedVersion] = None
        self._failed: dict[int, tuple] = {}
        self._warned_empty = False
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def current(self) -> Optional[LoadedVersion]:
        return self._current

    def poll_once(self) -> bool:
        """Load the highest version unless it is serving already; True when one was swapped in."""
        with self._poll_lock:
            versions = list_versions(self.base_path)
            current = self._current
            if not versions:
                if not self._warned_empty:
                    logger.warning("No versions of servable %s found under base path %s%s",
                                   self.name, self.base_path,
                                   f"; still serving version {current.version}" if current else "")
                    self._warned_empty = True
                return False
            self._warned_empty = False
            target = max(versions)
            if current is not None and current.version == target:
                return False
            path = versions[target]
            fingerprint = _fingerprint(path)
            if self._failed.get(target) == fingerprint:
                return False  # already failed with this content; retried once it changes
            logger.info("Loading servable %s version %d from %s", self.name, target, path)
            try:
                loaded = load_version(path, target)
            except Exception as error:  # noqa: BLE001 - any failure must leave the old version up
                self._failed[target] = fingerprint
                logger.error("Failed to load servable %s version %d from %s: %s: %s%s",
                             self.name, target, path, type(error).__name__, error,
                             f"; still serving version {current.version}" if current else "")
                return False
            self._failed.pop(target, None)
            self._current = loaded
            logger.info("Serving servable %s version %d%s", self.name, target,
                        f" (replacing version {current.version})" if current else "")
            return True

    def start_polling(self) -> None:
        if self._thread is not None or self.poll_seconds <= 0:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll_loop, name="tfformer-serve-poll",
                                        daemon=True)
        self._thread.start()

    def stop_polling(self, timeout: Optional[float] = None) -> None:
        """Stop the poller, waiting up to ``timeout`` for a load in progress (a daemon thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the poller must survive e.g. a vanished directory
                logger.exception("Polling %s failed", self.base_path)


# --------------------------------------------------------------------------------------------
# The gRPC services


def _servable_request(spec) -> str:
    """TF Serving's ServableRequest::DebugString(), as in its NOT_FOUND details."""
    if spec.HasField("version"):
        return f"Specific({spec.name}, {spec.version.value})"
    return f"Latest({spec.name})"


def _dtype_name(enum: int) -> str:
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"DataType({enum})"


def _to_tensor_proto(array: np.ndarray):
    proto = tf.make_tensor_proto(array)
    field = _PROTO_FIELD_BY_DTYPE.get(proto.dtype)
    if field and proto.tensor_content:
        getattr(proto, field).extend(np.asarray(array).ravel().tolist())
        proto.ClearField("tensor_content")
    return proto


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    """``tensorflow.serving.PredictionService`` over a ModelVersionManager."""

    def __init__(self, manager: ModelVersionManager, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 max_input_chars: int = DEFAULT_MAX_INPUT_CHARS):
        self.manager = manager
        self.max_batch_size = max_batch_size
        self.max_input_chars = max_input_chars

    # -- RPCs

    def Predict(self, request, context):
        return self._call(self._predict, request, context)

    def GetModelMetadata(self, request, context):
        return self._call(self._get_model_metadata, request, context)

    def Classify(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "Classify is not implemented by the tfformer model server; use Predict")

    def Regress(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "Regress is not implemented by the tfformer model server; use Predict")

    def MultiInference(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "MultiInference is not implemented by the tfformer model server; use Predict")

    # -- implementation

    @staticmethod
    def _call(method, request, context):
        try:
            return method(request)
        except ServingError as error:
            failure = error
        except Exception as error:  # noqa: BLE001 - never leak a traceback to the client
            logger.exception("Unexpected error serving %s", type(request).__name__)
            failure = ServingError(grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")
        logger.debug("%s -> %s: %s", type(request).__name__, failure.code.name, failure.details)
        context.abort(failure.code, failure.details)

    def resolve(self, spec) -> LoadedVersion:
        """The loaded version a ModelSpec asks for, or TF Serving's error for it."""
        if spec.version_label:
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"Unrecognized servable version label: {spec.version_label}")
        loaded = self.manager.current
        if (spec.name != self.manager.name or loaded is None
                or (spec.HasField("version") and spec.version.value != loaded.version)):
            raise ServingError(grpc.StatusCode.NOT_FOUND,
                               f"Servable not found for request: {_servable_request(spec)}")
        return loaded

    def _predict(self, request):
        if not request.HasField("model_spec"):
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
        loaded = self.resolve(request.model_spec)
        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        function = loaded.signatures.get(signature_name)
        if function is None:
            # TF Serving's wording and code (predict_util.cc): FAILED_PRECONDITION.
            raise ServingError(grpc.StatusCode.FAILED_PRECONDITION,
                               f'Serving signature key "{signature_name}" not found.')
        feeds = self._validate_inputs(function, request)
        output_names = self._validate_output_filter(function, request)
        logger.debug("Predict %s version %d signature %s batch %s", self.manager.name,
                     loaded.version, signature_name,
                     {k: tuple(v.shape) for k, v in feeds.items()})
        try:
            outputs = function(**feeds)
        except tf.errors.OpError as error:
            raise ServingError(_GRPC_CODE_BY_NUMBER.get(error.error_code, grpc.StatusCode.UNKNOWN),
                               error.message) from error
        response = predict_pb2.PredictResponse()
        response.model_spec.name = self.manager.name
        response.model_spec.signature_name = signature_name
        response.model_spec.version.value = loaded.version
        for name in output_names:
            response.outputs[name].CopyFrom(_to_tensor_proto(outputs[name].numpy()))
        return response

    def _validate_inputs(self, function, request) -> dict[str, tf.Tensor]:
        _, expected = function.structured_input_signature
        sent = set(request.inputs)
        if len(sent) != len(expected):
            join = ",".join
            raise ServingError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"input size does not match signature: {len(sent)}!={len(expected)} "
                f"len({{{join(sorted(sent))}}}) != len({{{join(sorted(expected))}}}). "
                f"Sent extra: {{{join(sorted(sent - set(expected)))}}}. "
                f"Missing but required: {{{join(sorted(set(expected) - sent))}}}.")
        feeds = {}
        for alias in sorted(sent):
            proto = request.inputs[alias]
            spec = expected.get(alias)
            if spec is None:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"input tensor alias not found in signature: {alias}. Inputs expected to be "
                    f"in the set {{{','.join(sorted(expected))}}}.")
            if proto.dtype != spec.dtype.as_datatype_enum:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f'input "{alias}": expected dtype {_dtype_name(spec.dtype.as_datatype_enum)} '
                    f"but got {_dtype_name(proto.dtype)}")
            shape = tf.TensorShape(proto.tensor_shape)
            if (shape.rank is None or not shape.is_fully_defined()
                    or not spec.shape.is_compatible_with(shape)):
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f'input "{alias}": shape {shape} (rank {shape.rank}) is not compatible with '
                    f"the signature's shape {spec.shape} (rank {spec.shape.rank})")
            if shape.rank >= 1:  # checked before parsing: the proto's shape sizes the array
                batch = shape[0]
                if batch == 0:
                    raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f'input "{alias}": empty batch; send at least one element')
                if batch > self.max_batch_size:
                    raise ServingError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f'input "{alias}": batch size {batch} exceeds the maximum of '
                        f"{self.max_batch_size}; split the request")
            try:
                array = tf.make_ndarray(proto)
            except Exception as error:  # noqa: BLE001 - any malformed proto
                raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"tensor parsing error: {alias}") from error
            if spec.dtype == tf.string:
                self._validate_strings(alias, array)
            feeds[alias] = tf.constant(array, dtype=spec.dtype)
        return feeds

    def _validate_strings(self, alias: str, array: np.ndarray) -> None:
        for index, value in enumerate(array.flat):
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f'input "{alias}"[{index}]: not valid UTF-8 ({error.reason} at byte '
                    f"{error.start})") from None
            if len(text) > self.max_input_chars:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f'input "{alias}"[{index}]: {len(text)} characters exceeds the maximum of '
                    f"{self.max_input_chars}")

    @staticmethod
    def _validate_output_filter(function, request) -> list[str]:
        available = sorted(function.structured_outputs)
        seen: list[str] = []
        for alias in request.output_filter:
            if alias not in available:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"output tensor alias not found in signature: {alias} Outputs expected to be "
                    f"in the set {{{','.join(available)}}}.")
            if alias in seen:
                raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"duplicate output tensor alias: {alias}")
            seen.append(alias)
        return seen or available

    def _get_model_metadata(self, request):
        if not request.HasField("model_spec"):
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
        if not request.metadata_field:
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                               "GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != SIGNATURE_DEF_FIELD:
                raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"Metadata field {field} is not supported")
        loaded = self.resolve(request.model_spec)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = self.manager.name
        response.model_spec.version.value = loaded.version
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature_def in loaded.signature_defs.items():
            signature_map.signature_def[key].CopyFrom(signature_def)
        response.metadata[SIGNATURE_DEF_FIELD].Pack(signature_map)
        return response


class ModelStatusServicer(model_service_pb2_grpc.ModelServiceServicer):
    """``tensorflow.serving.ModelService.GetModelStatus`` (for health checks); config reload is
    left UNIMPLEMENTED."""

    def __init__(self, manager: ModelVersionManager):
        self.manager = manager

    def GetModelStatus(self, request, context):
        spec = request.model_spec
        loaded = self.manager.current
        if spec.name != self.manager.name or loaded is None:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"Could not find any versions of model {spec.name}")
        if spec.HasField("version") and spec.version.value != loaded.version:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"Could not find version {spec.version.value} of model {spec.name}")
        response = get_model_status_pb2.GetModelStatusResponse()
        response.model_version_status.add(
            version=loaded.version, state=get_model_status_pb2.ModelVersionStatus.AVAILABLE)
        return response


# --------------------------------------------------------------------------------------------
# Server


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ServerHandle:
    """A running server: ``port`` (the bound one), ``address``, ``manager``, ``stop()``."""

    def __init__(self, server: grpc.Server, manager: ModelVersionManager, host: str, port: int):
        self._server = server
        self.manager = manager
        self.host = host
        self.port = port
        self.address = _address(host, port)
        self._stopped = False

    def stop(self, grace: Optional[float] = DEFAULT_GRACE_SECONDS) -> None:
        """Stop accepting RPCs, let in-flight ones finish for up to ``grace`` seconds, then stop."""
        if self._stopped:
            return
        self._stopped = True
        stopped = self._server.stop(grace)  # rejects new RPCs now
        self.manager.stop_polling(timeout=1.0)  # do not wait out a long model load
        stopped.wait()

    def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        return self._server.wait_for_termination(timeout)

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop(grace=1.0)


def start_server(
    model_base_path: str,
    model_name: Optional[str] = None,
    host: str = DEFAULT_HOST,
    port: int = 0,
    *,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    workers: int = DEFAULT_WORKERS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
) -> ServerHandle:
    """Load the highest version under ``model_base_path`` (the ``BASE/NAME`` dir) and serve it.

    ``model_name`` defaults to the base path's last component. ``port=0`` binds a free port (read
    it from the handle). ``poll_seconds <= 0`` disables polling. Raises ``FileNotFoundError`` when
    no version directory exists, ``RuntimeError`` when the highest version fails to load (like TF
    Serving, which does not start then), ``OSError`` when the address cannot be bound.
    """
    base_path = os.path.abspath(model_base_path)
    name = model_name or os.path.basename(base_path.rstrip(os.sep))
    import_tensorflow_text()
    manager = ModelVersionManager(name, base_path, poll_seconds)
    if not list_versions(base_path):
        raise FileNotFoundError(f"no version directory (e.g. {os.path.join(base_path, '1')}) "
                                f"with a saved_model.pb under {base_path}")
    manager.poll_once()
    if manager.current is None:
        raise RuntimeError(f"the highest version under {base_path} failed to load (see the log)")

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tfformer-serve"),
        # Without this gRPC sets SO_REUSEPORT and a second server on a busy port "binds" silently.
        options=[("grpc.so_reuseport", 0)],
    )
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(manager, max_batch_size, max_input_chars), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelStatusServicer(manager), server)
    try:
        bound = server.add_insecure_port(_address(host, port))
    except RuntimeError as error:
        raise OSError(f"cannot bind {_address(host, port)}: {error}") from error
    if not bound:
        raise OSError(f"cannot bind {_address(host, port)}")
    server.start()
    manager.start_polling()
    handle = ServerHandle(server, manager, host, bound)
    logger.info("Serving model %r version %d from %s at %s (gRPC)", name,
                manager.current.version, base_path, handle.address)
    return handle


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfformer-serve",
        description="Serve a TF Serving model base path over TF Serving's gRPC PredictionService "
                    "(a local stand-in for tensorflow_model_server).")
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
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_SECONDS,
                        help="how often to look for a new version; 0 disables "
                             "(default %(default)s)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help="RPC worker threads (default %(default)s)")
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                        help="largest batch accepted by Predict (default %(default)s)")
    parser.add_argument("--max-input-chars", type=int, default=DEFAULT_MAX_INPUT_CHARS,
                        help="longest input string, in characters (default %(default)s)")
    parser.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS,
                        help="on SIGTERM/SIGINT, time given to in-flight RPCs "
                             "(default %(default)s)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging level (default %(default)s)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for flag, value in (("--workers", args.workers), ("--max-batch-size", args.max_batch_size),
                        ("--max-input-chars", args.max_input_chars)):
        if value < 1:
            logger.error("%s must be at least 1, got %d", flag, value)
            return 2
    try:
        handle = start_server(
            args.model_base_path, args.model_name, args.host, args.port,
            poll_seconds=args.poll_seconds, workers=args.workers,
            max_batch_size=args.max_batch_size, max_input_chars=args.max_input_chars)
    except (OSError, RuntimeError) as error:
        logger.error("%s", error)
        return 1
    print(f"tfformer-serve: model {handle.manager.name!r} listening on {handle.address}",
          flush=True)

    stop = threading.Event()

    def on_signal(signum, _frame):
        logger.info("Received %s: stopping (grace %.1f s)", signal.Signals(signum).name,
                    args.grace_seconds)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(0.5):
        pass
    handle.stop(grace=args.grace_seconds)
    logger.info("Server stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

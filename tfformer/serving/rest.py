"""TF Serving's REST API (``tensorflow_model_server --rest_api_port``) beside the gRPC one.

``RestApi`` turns a JSON request into the same request proto the gRPC API receives and answers it
with the same `service` code, so REST and gRPC give the same answers and, once the JSON is
converted, the same errors; the JSON side follows TF Serving (``http_rest_api_handler.cc``,
``json_tensor.cc``), wording included:

* ``POST /v1/models/NAME[/versions/N | /labels/L]:predict`` with ``{"instances": [...]}`` (row
  format: ``{"predictions": [...]}``) or ``{"inputs": ...}`` (columnar: ``{"outputs": ...}``),
  optional ``"signature_name"``; strings as UTF-8 JSON strings or ``{"b64": "..."}``.
* ``GET /v1/models/NAME[/versions/N]`` (version status), ``GET .../metadata`` (signatures).
* Errors: ``{"error": "..."}`` with TF Serving's HTTP status for the status code (400 for
  INVALID_ARGUMENT and FAILED_PRECONDITION, 404 NOT_FOUND, 500 INTERNAL, 501 UNIMPLEMENTED);
  a path outside ``/v1/`` is 404, any other method or path under it 400 ``Malformed request``;
  a body over MAX_BODY_BYTES is 413, answered after the body is read and dropped (or before it
  is sent, to a client that asks ``Expect: 100-continue``); a chunked body is 411.

``RestServer`` serves it over HTTP/1.1 with the standard library's ThreadingHTTPServer: a
client's connection stays open for its next requests (keep-alive), as TF Serving's does.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, model_pb2, predict_pb2

from tfformer.contract import DEFAULT_SIGNATURE
from tfformer.serving.requests import ServingError
from tfformer.serving.service import (
    SIGNATURE_DEF_FIELD,
    PredictionServicer,
    model_status,
    unimplemented,
)

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
# A body over the limit is still read, and dropped, before the connection closes (up to this much,
# and while the client keeps sending): closing a socket with unread data resets the connection,
# and the client would never read its 413.
DRAIN_LIMIT_BYTES = 4 * MAX_BODY_BYTES
DRAIN_TIMEOUT_SECONDS = 2.0
# Connections the kernel completes before the server accepts them (listen's backlog).
REQUEST_QUEUE_SIZE = 128
# TensorFlow's TensorShape::kMaxDimensions: JSON nested deeper cannot be a tensor.
MAX_RANK = 254
_INT64_MAX = 2**63 - 1

_REST_PATH = re.compile(r"/v1/.*", re.IGNORECASE)
_PREDICTION_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
    r":(classify|regress|predict)", re.IGNORECASE)
_STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE)

# TF Serving's ToHTTPStatusCode (model_servers/http_server.cc).
HTTP_STATUS_BY_CODE = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

# TF's DataTypeString for the dtypes JSON converts to; other dtypes answer UNIMPLEMENTED.
_JSON_DTYPES = {
    types_pb2.DT_STRING: "string",
    types_pb2.DT_FLOAT: "float",
    types_pb2.DT_DOUBLE: "double",
    types_pb2.DT_INT8: "int8",
    types_pb2.DT_INT16: "int16",
    types_pb2.DT_INT32: "int32",
    types_pb2.DT_INT64: "int64",
    types_pb2.DT_UINT8: "uint8",
    types_pb2.DT_UINT32: "uint32",
    types_pb2.DT_UINT64: "uint64",
    types_pb2.DT_BOOL: "bool",
}


def _invalid(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _show(value: Any, limit: int = 200) -> str:
    """A JSON value in an error message (shortened: a request may hold 64 long sentences)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except RecursionError:
        return f"({_json_type(value)} nested too deeply to show)"
    return text if len(text) <= limit else text[:limit] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    return "String" if isinstance(value, str) else "Number"


def _is_base64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_named(value: Any) -> bool:
    return isinstance(value, dict) and not _is_base64(value)


# --------------------------------------------------------------------------------------------
# JSON -> tensors (json_tensor.cc: FillPredictRequestFromJson)


def _scalar(value: Any, dtype: int) -> Any:
    """One JSON leaf as a value of ``dtype``, or TF Serving's INVALID_ARGUMENT for it."""
    def type_error():
        return _invalid(f"JSON Value: {_show(value)} Type: {_json_type(value)} is not of "
                        f"expected type: {_JSON_DTYPES[dtype]}")

    if dtype == types_pb2.DT_STRING:
        if isinstance(value, str):
            # Lone surrogates ("\ud800") stay invalid UTF-8, for the validator to reject.
            return value.encode("utf-8", "surrogatepass")
        if not _is_base64(value):
            if isinstance(value, dict):
                raise _invalid(f"JSON Value: {_show(value)} not formatted correctly for base64 "
                               "data")
            raise type_error()
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise _invalid("Unable to base64 decode") from None
    if isinstance(value, (bool, dict, list, str)) or value is None:
        if dtype == types_pb2.DT_BOOL and isinstance(value, bool):
            return value
        raise type_error()
    if dtype == types_pb2.DT_BOOL or (
            not isinstance(value, int) and dtype not in (types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE)):
        raise type_error()
    return value  # numbers out of the dtype's range fail in json_to_array


def _dense_shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill(value: Any, level: int, shape: list[int], dtype: int, out: list) -> None:
    if not isinstance(value, list):
        if level != len(shape):
            raise _invalid(f"JSON Value: {_show(value)} found at incorrect level: {level + 1} "
                           f"in the JSON DOM. Expected at level: {len(shape)}")
        out.append(_scalar(value, dtype))
        return
    if level >= len(shape):
        raise _invalid(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
    if len(value) != shape[level]:
        raise _invalid(f"Encountered list at unexpected size: {len(value)} at level: {level} "
                       f"expected size: {shape[level]}")
    for item in value:
        _fill(item, level + 1, shape, dtype, out)


def json_to_array(value: Any, dtype: int) -> np.ndarray:
    """A JSON value (nested lists of leaves) as an array of ``dtype``, as TF Serving reads it."""
    if dtype not in _JSON_DTYPES:
        raise ServingError(grpc.StatusCode.UNIMPLEMENTED,
                           f"Conversion of JSON Value: {_show(value)} to type: "
                           f"{tf.as_dtype(dtype).name}")
    shape = _dense_shape(value)
    if len(shape) > MAX_RANK:
        raise _invalid(f"JSON Value nested {len(shape)} levels deep: a tensor has at most "
                       f"{MAX_RANK} dimensions")
    values: list = []
    _fill(value, 0, shape, dtype, values)
    numpy_dtype = object if dtype == types_pb2.DT_STRING else tf.as_dtype(dtype).as_numpy_dtype
    try:
        return np.array(values, dtype=numpy_dtype).reshape(shape)
    except OverflowError:  # named by the value, as TF Serving names it
        limits = np.iinfo(numpy_dtype)
        value = next((v for v in values if not limits.min <= v <= limits.max), value)
        raise _invalid(f"JSON Value: {_show(value)} is out of range for "
                       f"{_JSON_DTYPES[dtype]}") from None


def _shape_text(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _rows(instances: list, infos: dict) -> dict[str, np.ndarray]:
    """The row format's "instances": one value per instance, or one object of named inputs."""
    if not _is_named(instances[0]) and len(infos) > 1:
        raise _invalid("instances is a plain list, but expecting list of objects as multiple "
                       "input tensors required as per tensorinfo_map")
    named = _is_named(instances[0])
    items: dict[str, list[np.ndarray]] = {}

    def add(item, name, index, key_text):
        try:
            if name not in infos:
                raise _invalid(f"JSON object: does not have named input: {name}")
            array = json_to_array(item, infos[name].dtype)
            if items.get(name) and items[name][0].shape != array.shape:
                first = items[name][0]
                raise _invalid(f"Expecting tensor size: {first.size} but got: {array.size}"
                               if first.size != array.size else
                               f"Expecting shape {_shape_text(first.shape)} but got: "
                               f"{_shape_text(array.shape)}")
        except ServingError as error:
            raise ServingError(error.code, f"Failed to process element: {index}{key_text} of "
                                           f"'instances' list. Error: {error}") from None
        items.setdefault(name, []).append(array)

    for index, instance in enumerate(instances):
        if named:
            if not _is_named(instance):
                raise _invalid(f"Expecting object but got list at item {index} of input list")
            for name, item in instance.items():
                add(item, name, index, f" key: {name}")
            if set(instance) != set(infos):
                raise _invalid(f"Failed to process element: {index} of 'instances' list. JSON "
                               f"object: {_show(instance)} must only have keys: "
                               f"{','.join(sorted(infos))}")
        else:
            if _is_named(instance):
                raise _invalid(f"Expecting value/list but got object at item {index} of input "
                               "list")
            add(instance, next(iter(infos)), index, "")
    return {name: np.stack(arrays) for name, arrays in items.items()}


def _columns(inputs: Any, infos: dict) -> dict[str, np.ndarray]:
    """The columnar format's "inputs": a value for the one input, or an object of named ones."""
    if not _is_named(inputs):
        if len(infos) > 1:
            raise _invalid("inputs is a plain value/list, but expecting an object as multiple "
                           "input tensors required as per tensorinfo_map")
        name, info = next(iter(infos.items()))
        return {name: json_to_array(inputs, info.dtype)}
    arrays = {}
    for name, info in infos.items():
        if name not in inputs:
            raise _invalid(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = json_to_array(inputs[name], info.dtype)
    return arrays


# --------------------------------------------------------------------------------------------
# Tensors -> JSON (json_tensor.cc: MakeJsonFromTensors)


def _json_float(value) -> float:
    # The shortest decimal that reads back as the same float32, as TF Serving writes floats
    # (not float32 widened to double's noise digits: -1.73, not -1.7300000190734863).
    return float(str(value)) if isinstance(value, np.float32) else float(value)


def array_to_json(array: np.ndarray, name: str) -> Any:
    """A tensor as JSON: strings as text (``{"b64": ...}`` for an output named ``*_bytes``)."""
    if array.dtype == object:
        if name.endswith("_bytes"):
            def convert(v):
                return {"b64": base64.b64encode(v).decode("ascii")}
        else:
            def convert(v):
                return v.decode("utf-8", "replace")
    elif array.dtype.kind == "f":
        convert = _json_float
    else:
        return array.tolist()
    converted = np.empty(array.shape, dtype=object)
    for index, value in np.ndenumerate(array):
        converted[index] = convert(value)
    return converted.tolist()


def _predictions(arrays: dict[str, np.ndarray]) -> list:
    batch = None
    for name, array in arrays.items():
        if array.ndim == 0:
            raise _invalid(f"Tensor name: {name} has no shape information ")
        if batch is None:
            batch = array.shape[0]
        elif array.shape[0] != batch:
            raise _invalid(f"Tensor name: {name} has inconsistent batch size: {array.shape[0]} "
                           f"expecting: {batch}")
    columns = {name: array_to_json(array, name) for name, array in arrays.items()}
    if len(columns) == 1:
        return next(iter(columns.values()))
    return [{name: column[i] for name, column in columns.items()} for i in range(batch or 0)]


# --------------------------------------------------------------------------------------------
# The API


def _parse_json(body: bytes) -> dict:
    if not body.strip():
        raise _invalid("JSON Parse error: The document is empty")
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise _invalid(f"JSON Parse error: {error}") from None
    except RecursionError:
        raise _invalid("JSON Parse error: the document is nested too deeply") from None
    if not isinstance(document, dict):
        raise _invalid(f"JSON Value: {_show(document)} Is not object")
    return document


class RestApi:
    """TF Serving's REST API over a PredictionServicer: ``handle(method, path, body)`` ->
    ``(HTTP status, JSON object)``; never raises."""

    def __init__(self, servicer: PredictionServicer):
        self.servicer = servicer
        self.manager = servicer.manager

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if not _REST_PATH.fullmatch(path):
            return 404, {"error": f"Not found: {path} (the REST API is under /v1/)"}
        try:
            return 200, self._dispatch(method, path, body)
        except ServingError as error:
            failure = error
        except Exception as error:  # noqa: BLE001 - never leak a traceback to the client
            logger.exception("Unexpected error serving %s %s", method, path)
            failure = ServingError(grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")
        logger.debug("%s %s -> %s: %s", method, path, failure.code.name, failure.details)
        return HTTP_STATUS_BY_CODE.get(failure.code, 500), {"error": failure.details}

    def _dispatch(self, method: str, path: str, body: bytes) -> Any:
        if method == "POST" and (match := _PREDICTION_PATH.fullmatch(path)):
            name, version, label, call = match.groups()
            spec = _model_spec(name, version, label)
            if call == "predict":
                return self._predict(spec, body)
            if call in ("classify", "regress"):
                raise unimplemented(call.capitalize())
        elif method == "GET" and (match := _STATUS_PATH.fullmatch(path)):
            name, version, label, subresource = match.groups()
            if not name:
                raise _invalid("Missing model name in request.")
            spec = _model_spec(name, version, label)
            if subresource:
                return self._metadata(spec)
            return json_format.MessageToDict(model_status(self.manager, spec),
                                             always_print_fields_with_no_presence=True)
        raise _invalid(f"Malformed request: {method} {path}")

    def _predict(self, spec, body: bytes) -> dict:
        document = _parse_json(body)
        signature = document.get("signature_name", "")
        if not isinstance(signature, str):
            raise _invalid(f"JSON Value: {_show(document)} not formatted correctly. "
                           "'signature_name' key must be a string value.")
        spec.signature_name = signature
        infos = self._input_infos(spec)
        if "instances" in document and "inputs" in document:
            raise _invalid(f"JSON Value: {_show(document)} Not formatted correctly expecting "
                           "only one of 'inputs' or 'instances' keys to exist ")
        if "instances" in document:
            instances = document["instances"]
            if not isinstance(instances, list):
                raise _invalid(f"JSON Value: {_show(document)} Excepting 'instances' to be an "
                               "list/array")
            if not instances:
                raise _invalid(f"JSON Value: {_show(document)} No values in 'instances' array")
            arrays = _rows(instances, infos)
        elif "inputs" in document:
            arrays = _columns(document["inputs"], infos)
        else:
            raise _invalid("Missing 'inputs' or 'instances' key")

        request = predict_pb2.PredictRequest()
        request.model_spec.CopyFrom(spec)
        for name, array in arrays.items():
            request.inputs[name].CopyFrom(
                tf.make_tensor_proto(array, dtype=tf.as_dtype(infos[name].dtype),
                                     shape=array.shape))
        response = self.servicer.predict(request)
        outputs = {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}
        if "instances" in document:
            return {"predictions": _predictions(outputs)}
        columns = {name: array_to_json(array, name) for name, array in outputs.items()}
        return {"outputs": next(iter(columns.values())) if len(columns) == 1 else columns}

    def _input_infos(self, spec) -> dict:
        """The signature's inputs (alias -> TensorInfo), as TF Serving's GetInfoMap finds them."""
        loaded = self.servicer.resolve(spec)
        name = spec.signature_name or DEFAULT_SIGNATURE
        signature = loaded.signature_defs.get(name)
        if signature is None:
            raise _invalid(f'Serving signature name: "{name}" not found in signature def')
        if not signature.inputs:
            raise _invalid(f"Failed to get input map for signature: "
                           f"{spec.signature_name or 'DEFAULT'}")
        return dict(sorted(signature.inputs.items()))

    def _metadata(self, spec) -> dict:
        request = get_model_metadata_pb2.GetModelMetadataRequest()
        request.model_spec.CopyFrom(spec)
        request.metadata_field.append(SIGNATURE_DEF_FIELD)
        response = self.servicer.model_metadata(request)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(signature_map)

        def to_json(message):
            return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                             preserving_proto_field_name=True)

        return {"model_spec": to_json(response.model_spec),
                "metadata": {SIGNATURE_DEF_FIELD: to_json(signature_map)}}


def _model_spec(name: str, version: str | None, label: str | None):
    spec = model_pb2.ModelSpec(name=unquote(name))
    if version is not None:
        if int(version) > _INT64_MAX:
            raise _invalid(f"Failed to convert version: {version} to numeric.")
        spec.version.value = int(version)
    if label is not None:
        spec.version_label = unquote(label)
    return spec


# --------------------------------------------------------------------------------------------
# HTTP


def _handler_class(api: RestApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tfformer-serve"
        # Keep-alive: a client's next request reuses its connection, so N clients answered by
        # one merged batch do not all reconnect at once, and a request costs no new thread.
        protocol_version = "HTTP/1.1"
        # An answer is two writes (the head, then the body). On a connection that stays open,
        # Nagle's algorithm holds the body until the client ACKs the head, which it delays
        # (~40 ms on Linux) while it waits for the rest of the answer.
        disable_nagle_algorithm = True
        timeout = 60  # seconds a client may take to send a request, or leave its connection idle

        def handle_one_request(self) -> None:
            if self.server.await_request(self):
                try:
                    super().handle_one_request()
                finally:
                    self.server.request_read(self)
            else:
                self.close_connection = True

        def parse_request(self) -> bool:
            self.server.request_read(self)  # the request line has come: no longer idle
            return super().parse_request()

        def handle_expect_100(self) -> bool:
            """`Expect: 100-continue` (curl's for large bodies): a body that would be refused
            is refused before the client sends it."""
            refusal = self._refusal()
            if refusal is None:
                return super().handle_expect_100()
            self._send(*refusal, close=True)
            return False

        def _refusal(self) -> tuple[int, dict] | None:
            """The answer to a request whose body will not be read, from its headers alone."""
            if self.headers.get("Transfer-Encoding"):
                return 411, {"error": "a request body needs a Content-Length (chunked transfer "
                                      "encoding is not supported)"}
            length = self.headers.get("Content-Length") or "0"
            if not length.isdigit():
                return 400, {"error": f"invalid Content-Length: {length}"}
            if int(length) > MAX_BODY_BYTES:
                return 413, {"error": f"request body of {length} bytes exceeds the maximum of "
                                      f"{MAX_BODY_BYTES}"}
            return None

        def _answer(self) -> None:
            refusal = self._refusal()
            if refusal is None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or "0"))
                # close_connection: the client's `Connection: close` or HTTP/1.0.
                self._send(*api.handle(self.command, urlsplit(self.path).path, body),
                           close=self.close_connection or self.server.closing)
                return
            # Where the body ends is unknown or it is not read: the connection cannot carry
            # another request.
            self._send(*refusal, close=True)
            if refusal[0] in (411, 413):  # a body follows: drop it, so that the close is no reset
                self.wfile.flush()
                self._drain(DRAIN_LIMIT_BYTES if refusal[0] == 411
                            else int(self.headers["Content-Length"]))

        def _send(self, status: int, answer: Any, *, close: bool) -> None:
            payload = json.dumps(answer, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if close:
                self.send_header("Connection", "close")  # also ends this handler's loop
            self.end_headers()
            self.wfile.write(payload)

        def _drain(self, length: int) -> None:
            """Reads and drops up to `length` bytes of a refused body (DRAIN_LIMIT_BYTES at most),
            until the client stops sending for DRAIN_TIMEOUT_SECONDS."""
            remaining = min(length, DRAIN_LIMIT_BYTES)
            self.connection.settimeout(DRAIN_TIMEOUT_SECONDS)
            try:
                while remaining > 0:
                    chunk = self.rfile.read1(min(remaining, 1 << 16))
                    if not chunk:
                        break
                    remaining -= len(chunk)
            except OSError:  # the timeout, or the client closed its end
                pass

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            logger.debug("REST %s: " + format, self.address_string(), *args)

    return Handler


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for the requests in flight
    block_on_close = True
    # Clients without keep-alive (HTTP/1.0, `Connection: close`) connect once per request, so N
    # of them answered by one merged batch reconnect at once. The kernel drops a SYN that finds
    # the accept queue full, and the client sends it again only after a second: socketserver's
    # default queue of 5 is too short.
    request_queue_size = REQUEST_QUEUE_SIZE

    def __init__(self, *args, **kwargs):
        self._lock = threading.Lock()
        self._idle: set[BaseHTTPRequestHandler] = set()  # waiting for a request on keep-alive
        self.closing = False
        super().__init__(*args, **kwargs)

    def await_request(self, handler: BaseHTTPRequestHandler) -> bool:
        """Marks the handler's connection idle until its next request line; False once the
        server is closing (the connection is then closed)."""
        with self._lock:
            if self.closing:
                return False
            self._idle.add(handler)
            return True

    def request_read(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self._idle.discard(handler)

    def close_idle_connections(self) -> None:
        """Closes the connections that wait for a next request; those answering one close
        once it is answered. Then server_close() has no idle connection to wait for."""
        with self._lock:
            self.closing = True
            for handler in self._idle:
                try:
                    handler.connection.shutdown(socket.SHUT_RDWR)
                except OSError:  # the client closed it already
                    pass


class RestServer:
    """The REST API served on ``host:port`` (0: a free port) from a thread; ``port`` is the bound
    one. ``shutdown()`` stops accepting, ``close()`` then waits for the requests in flight."""

    def __init__(self, api: RestApi, host: str, port: int):
        server_class = type("_HTTPServer6", (_HTTPServer,), {"address_family": socket.AF_INET6}) \
            if ":" in host else _HTTPServer
        try:
            self._httpd = server_class((host, port), _handler_class(api))
        except OSError as error:
            raise OSError(f"cannot bind the REST API to {host}:{port}: {error}") from error
        self.host = host
        self.port = self._httpd.server_address[1]
        self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.2,),
                                        name="tfformer-serve-rest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()

    def close(self) -> None:
        self.shutdown()
        self._httpd.close_idle_connections()
        self._httpd.server_close()

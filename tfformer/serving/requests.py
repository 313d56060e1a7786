"""Validating a Predict request against the signature and converting tensors, with TF Serving's
status codes and, where TF Serving has one, its wording.

Beyond TF Serving, it rejects empty batches, batches over the server's maximum batch size,
strings that are not valid UTF-8 and strings over its maximum length, so that a bad request
costs no model time.
"""

from __future__ import annotations

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from tfformer.serving.defaults import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_INPUT_CHARS

# tf.errors codes are the canonical status codes, numbered like gRPC's.
GRPC_CODE_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}
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


def op_error_message(error: tf.errors.OpError) -> str:
    """An error of the model's graph in TF Serving's words: its own message (e.g. `assertion
    failed: [...]`), without the "Graph execution error:" preamble (failing nodes, stack traces)
    that calling a function eagerly puts before it."""
    lines = error.message.split("\n")
    if lines[0] != "Graph execution error:":
        return error.message
    for index, line in enumerate(lines[1:], 1):
        if line and not line[0].isspace() and not line.startswith("Detected at node ") \
                and line != "<stack traces unavailable>":
            return "\n".join(lines[index:])
    return error.message


def serving_error(error: tf.errors.OpError) -> ServingError:
    """The ServingError for an error of the model's graph: its status code (InvalidArgument ->
    INVALID_ARGUMENT, as TF Serving answers) and `op_error_message`."""
    return ServingError(GRPC_CODE_BY_NUMBER.get(error.error_code, grpc.StatusCode.UNKNOWN),
                        op_error_message(error))


def servable_request(spec) -> str:
    """TF Serving's ServableRequest::DebugString(), as in its NOT_FOUND details."""
    if spec.HasField("version"):
        return f"Specific({spec.name}, {spec.version.value})"
    return f"Latest({spec.name})"


def dtype_name(enum: int) -> str:
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"DataType({enum})"


def to_tensor_proto(array: np.ndarray):
    proto = tf.make_tensor_proto(array)
    field = _PROTO_FIELD_BY_DTYPE.get(proto.dtype)
    if field and proto.tensor_content:
        getattr(proto, field).extend(np.asarray(array).ravel().tolist())
        proto.ClearField("tensor_content")
    return proto


class RequestValidator:
    """Checks a PredictRequest's inputs and output filter against a signature.

    Args:
        max_batch_size: largest batch accepted.
        max_input_chars: longest string accepted, in characters.
    """

    def __init__(self, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 max_input_chars: int = DEFAULT_MAX_INPUT_CHARS):
        self.max_batch_size = max_batch_size
        self.max_input_chars = max_input_chars

    def inputs(self, function, request) -> dict[str, tf.Tensor]:
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
                    f'input "{alias}": expected dtype {dtype_name(spec.dtype.as_datatype_enum)} '
                    f"but got {dtype_name(proto.dtype)}")
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
                self._strings(alias, array)
            feeds[alias] = tf.constant(array, dtype=spec.dtype)
        return feeds

    def _strings(self, alias: str, array: np.ndarray) -> None:
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
    def output_filter(function, request) -> list[str]:
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

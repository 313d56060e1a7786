"""TF Serving's warmup requests: `assets.extra/tf_serving_warmup_requests` in a version directory.

A TFRecord file of `PredictionLog` protos that TF Serving replays when it loads the version, before
the version serves, so that the first real request does not pay for the first run of each
signature (TF Serving's "SavedModel Warmup"). The export writes one small Predict request per
signature of `tfformer.contract`; `tfformer-serve` replays them as TF Serving does.
"""

from __future__ import annotations

import os
from typing import Sequence

import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from tfformer.contract import INPUT_DTYPES, SIGNATURE_INPUTS

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# TF Serving refuses a version whose file holds more (saved_model_warmup_util.cc).
MAX_WARMUP_RECORDS = 1000


def warmup_requests(model_name: str, calls: dict[str, dict[str, list]]
                    ) -> list[predict_pb2.PredictRequest]:
    """One Predict request per signature of `calls` ({signature: {input: [a value per
    sentence]}}, as `tfformer.export.saved_model.check_calls` makes them), in their order."""
    requests = []
    for signature, inputs in calls.items():
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model_name
        request.model_spec.signature_name = signature
        for name in SIGNATURE_INPUTS[signature]:
            values = inputs[name]
            if INPUT_DTYPES[name] == "string":
                values = [value.encode("utf-8") for value in values]
            request.inputs[name].CopyFrom(
                tf.make_tensor_proto(values, dtype=tf.as_dtype(INPUT_DTYPES[name]),
                                     shape=[len(values)]))
        requests.append(request)
    return requests


def write_warmup_requests(version_dir: str | os.PathLike,
                          requests: Sequence[predict_pb2.PredictRequest]) -> str:
    """Writes VERSION_DIR/assets.extra/tf_serving_warmup_requests; returns its path."""
    path = os.path.join(version_dir, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(version_dir: str | os.PathLike) -> list[predict_pb2.PredictRequest]:
    """The Predict requests of the version's warmup file, in order ([] without one).

    Raises:
        ValueError: an unreadable file, a record that is not a PredictionLog of a Predict
            request, or more than MAX_WARMUP_RECORDS records.
    """
    path = os.path.join(version_dir, WARMUP_FILE)
    if not os.path.exists(path):
        return []
    requests = []
    try:
        records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    except tf.errors.OpError as error:
        raise ValueError(f"{path}: not a TFRecord file ({error.message})") from None
    if len(records) > MAX_WARMUP_RECORDS:
        raise ValueError(f"{path}: {len(records)} warmup records, more than the "
                         f"{MAX_WARMUP_RECORDS} TF Serving reads")
    for number, record in enumerate(records, start=1):
        log = prediction_log_pb2.PredictionLog()
        try:
            log.ParseFromString(record)
        except DecodeError:
            raise ValueError(f"{path}: record {number} is not a PredictionLog") from None
        kind = log.WhichOneof("log_type")
        if kind != "predict_log":
            raise ValueError(f"{path}: record {number} is a {kind or 'empty PredictionLog'}; "
                             "this model takes Predict warmup requests only")
        requests.append(log.predict_log.request)
    return requests

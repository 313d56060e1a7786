"""Request batching as TF Serving does it (`--enable_batching`): concurrent Predict calls of one
signature are merged on dimension 0, run once, and the answers split back per request, in order.

The settings are TF Serving's `BatchingParameters`, read from the same text-format file
(`--batching_parameters_file`) with the same message (`tensorflow_serving/servables/tensorflow/
session_bundle_config.proto`, declared here: tensorflow-serving-api does not ship it); what a
file leaves out takes the defaults of TF Serving's BasicBatchScheduler.

As in TF Serving's batching session:
- each request is a task of its dimension 0 (every input must have one, the same for all);
- a task joins the open batch of its signature (and version) while it fits in
  `max_batch_size`, else opens a new one; `num_batch_threads` threads run the batches, each
  taking a full one, or one open for `batch_timeout_micros` (with 0, what is there once a
  thread is free: requests merge while every thread is busy);
- a task larger than `max_batch_size` is INVALID_ARGUMENT; a task that finds
  `max_enqueued_batches` batches waiting is UNAVAILABLE ("the batch scheduling queue ... is
  full"), and the server serves on;
- a batch is padded to the next of `allowed_batch_sizes` with copies of its first row; with
  `pad_variable_length_inputs`, inputs of rank > 1 are padded to the batch's longest (zeros,
  empty strings), else they must have equal shapes after dimension 0.
One difference: a merged batch that fails (e.g. one request's k out of range) is rerun task by
task, so that only the bad request fails; TF Serving fails every request of the batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from concurrent import futures
from typing import Any, Callable

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,
)

from tfformer.serving.requests import ServingError

logger = logging.getLogger(__name__)


def _batching_parameters_class():
    """TF Serving's BatchingParameters message (its field names, numbers and types)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="tfformer/batching_parameters.proto", package="tensorflow.serving",
        syntax="proto3", dependency=["google/protobuf/wrappers.proto"])
    message = file.message_type.add(name="BatchingParameters")
    Field = descriptor_pb2.FieldDescriptorProto  # noqa: N806
    for number, (name, kind) in enumerate((
            ("max_batch_size", ".google.protobuf.Int64Value"),
            ("batch_timeout_micros", ".google.protobuf.Int64Value"),
            ("thread_pool_name", ".google.protobuf.StringValue"),
            ("num_batch_threads", ".google.protobuf.Int64Value"),
            ("max_enqueued_batches", ".google.protobuf.Int64Value"),
            ("allowed_batch_sizes", None),
            ("pad_variable_length_inputs", None),
            ("enable_large_batch_splitting", ".google.protobuf.BoolValue"),
            ("max_execution_batch_size", ".google.protobuf.Int64Value")), start=1):
        field = message.field.add(name=name, number=number, label=Field.LABEL_OPTIONAL)
        if name == "allowed_batch_sizes":
            field.label, field.type = Field.LABEL_REPEATED, Field.TYPE_INT64
        elif name == "pad_variable_length_inputs":
            field.type = Field.TYPE_BOOL
        else:
            field.type, field.type_name = Field.TYPE_MESSAGE, kind
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


BatchingParametersProto = _batching_parameters_class()


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's batching settings; the defaults are its BasicBatchScheduler's."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    allowed_batch_sizes: tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_timeout_micros < 0:
            raise ValueError(f"batch_timeout_micros must be >= 0, got "
                             f"{self.batch_timeout_micros}")
        sizes = self.allowed_batch_sizes
        if sizes:  # TF Serving's checks (batching_session.cc)
            if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
                raise ValueError(f"allowed_batch_sizes must be positive and increasing, got "
                                 f"{list(sizes)}")
            if sizes[-1] != self.max_batch_size:
                raise ValueError(f"the last entry of allowed_batch_sizes ({sizes[-1]}) must "
                                 f"equal max_batch_size ({self.max_batch_size})")

    @classmethod
    def from_text(cls, text: str, source: str = "batching parameters") -> "BatchingParameters":
        """Parses TF Serving's text-format BatchingParameters (`--batching_parameters_file`).

        Raises:
            ValueError: text that does not parse (naming the line and field), or a value TF
                Serving refuses.
        """
        proto = BatchingParametersProto()
        try:
            text_format.Parse(text, proto)
        except text_format.ParseError as error:
            raise ValueError(f"{source}: {error}") from None
        values = {}
        for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                     "num_batch_threads"):
            if proto.HasField(name):
                values[name] = getattr(proto, name).value
        values["allowed_batch_sizes"] = tuple(proto.allowed_batch_sizes)
        values["pad_variable_length_inputs"] = proto.pad_variable_length_inputs
        try:
            return cls(**values)
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None

    @classmethod
    def from_file(cls, path: str) -> "BatchingParameters":
        with open(path, encoding="utf-8") as f:
            return cls.from_text(f.read(), path)


def task_size(feeds: dict[str, tf.Tensor]) -> int:
    """A request's dimension 0, the same for every input (TF Serving's ComputeTensorBatchSize)."""
    sizes = set()
    for name, tensor in feeds.items():
        if tensor.shape.rank == 0:
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                               "Batching Run() input tensors must have at least one dimension")
        sizes.add(int(tensor.shape[0]))
    if len(sizes) != 1:
        raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                           "Batching Run() input tensors must have equal 0th-dimension size")
    return sizes.pop()


@dataclasses.dataclass
class _Task:
    feeds: dict[str, np.ndarray]
    size: int
    result: futures.Future


class _Batch:
    def __init__(self, function: Callable, opened: float):
        self.function = function
        self.tasks: list[_Task] = []
        self.size = 0
        self.opened = opened


class Batcher:
    """Merges concurrent calls of one function (a signature of one version) on dimension 0.

    `run(key, function, feeds)` blocks until the call's share of its batch is back: a dict of
    output name -> NumPy array, or it raises ServingError (or the function's tf.errors.OpError).
    """

    def __init__(self, parameters: BatchingParameters):
        self.parameters = parameters
        self._lock = threading.Condition()
        self._open: dict[Any, _Batch] = {}  # key -> the batch still taking tasks
        self._closed: list[_Batch] = []  # waiting for a batch thread
        self._stopped = False
        self.batches_run = 0  # merged runs, for tests and logs
        self.tasks_run = 0
        self._threads = [threading.Thread(target=self._work, name=f"tfformer-batch-{i}",
                                          daemon=True)
                         for i in range(parameters.num_batch_threads)]
        for thread in self._threads:
            thread.start()

    def run(self, key: Any, function: Callable, feeds: dict[str, tf.Tensor]) -> dict:
        size = task_size(feeds)
        limit = self.parameters.max_batch_size
        if size > limit:
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"Task size {size} is larger than maximum input batch size "
                               f"{limit}")
        task = _Task({name: tensor.numpy() for name, tensor in feeds.items()}, size,
                     futures.Future())
        with self._lock:
            batch = self._open.get(key)
            if batch is not None and batch.size + size > limit:
                self._close(key)
                batch = None
            if batch is None:
                if len(self._closed) + len(self._open) >= self.parameters.max_enqueued_batches:
                    raise ServingError(
                        grpc.StatusCode.UNAVAILABLE,
                        "The batch scheduling queue to which this task was submitted is full")
                batch = self._open[key] = _Batch(function, time.monotonic())
            batch.tasks.append(task)
            batch.size += size
            if batch.size == limit:
                self._close(key)
            self._lock.notify_all()
        return task.result.result()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- batch threads

    def _close(self, key) -> None:
        self._closed.append(self._open.pop(key))

    def _next_batch(self) -> _Batch | None:
        """A full batch, else the oldest open one once its timeout is over (taking it closes
        it), waiting as long as needed; None once stopped."""
        timeout = self.parameters.batch_timeout_micros / 1e6
        with self._lock:
            while not self._stopped:
                if self._closed:
                    return self._closed.pop(0)
                if self._open:
                    key, oldest = min(self._open.items(), key=lambda item: item[1].opened)
                    wait = oldest.opened + timeout - time.monotonic()
                    if wait <= 0:
                        return self._open.pop(key)
                    self._lock.wait(timeout=wait)
                else:
                    self._lock.wait()
        return None

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._run(batch)

    def _run(self, batch: _Batch) -> None:
        try:
            outputs = self._merged(batch)
        except Exception as error:  # noqa: BLE001 - handed to the requests, or retried alone
            if len(batch.tasks) == 1:
                batch.tasks[0].result.set_exception(error)
                return
            for task in batch.tasks:  # only the bad request fails
                single = _Batch(batch.function, batch.opened)
                single.tasks, single.size = [task], task.size
                self._run(single)
            return
        start = 0
        for task in batch.tasks:
            task.result.set_result({name: value[start:start + task.size]
                                    for name, value in outputs.items()})
            start += task.size

    def _merged(self, batch: _Batch) -> dict[str, np.ndarray]:
        names = batch.tasks[0].feeds.keys()
        merged = {name: self._concatenate([task.feeds[name] for task in batch.tasks])
                  for name in names}
        size = batch.size
        padded = next((s for s in self.parameters.allowed_batch_sizes if s >= size), size)
        if padded > size:  # copies of the first row, as TF Serving pads
            merged = {name: np.concatenate([value, np.repeat(value[:1], padded - size, axis=0)])
                      for name, value in merged.items()}
        outputs = batch.function(**{name: tf.constant(value) for name, value in merged.items()})
        with self._lock:
            self.batches_run += 1
            self.tasks_run += len(batch.tasks)
        return {name: tensor.numpy()[:size] for name, tensor in outputs.items()}

    def _concatenate(self, values: list[np.ndarray]) -> np.ndarray:
        shapes = {value.shape[1:] for value in values}
        if len(shapes) > 1:
            if not self.parameters.pad_variable_length_inputs:
                raise ServingError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "Tensors with name have different shapes after dimension 0 and "
                    "pad_variable_length_inputs is false")
            widest = tuple(max(dims) for dims in zip(*shapes))
            values = [np.pad(value, [(0, 0)] + [(0, w - d) for w, d in
                                                 zip(widest, value.shape[1:])],
                             constant_values=b"" if value.dtype == object else 0)
                      for value in values]
        return np.concatenate(values, axis=0)

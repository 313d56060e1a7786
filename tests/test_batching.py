"""Request batching (tfformer.serving.batching) as TF Serving does it: its parameters file, and
the Batcher on plain functions (the server and the real export: tests/test_server.py and
tests/test_export.py)."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf

from tfformer.serving.batching import Batcher, BatchingParameters
from tfformer.serving.requests import ServingError


def test_parameters_file_is_read_as_tf_serving_reads_it(tmp_path):
    path = tmp_path / "batching.config"
    path.write_text("max_batch_size { value: 32 }\nbatch_timeout_micros { value: 5000 }\n"
                    "max_enqueued_batches { value: 4 }\nnum_batch_threads { value: 3 }\n"
                    "allowed_batch_sizes: 8\nallowed_batch_sizes: 32\n"
                    "pad_variable_length_inputs: true\n")
    assert BatchingParameters.from_file(str(path)) == BatchingParameters(
        max_batch_size=32, batch_timeout_micros=5000, max_enqueued_batches=4,
        num_batch_threads=3, allowed_batch_sizes=(8, 32), pad_variable_length_inputs=True)
    defaults = BatchingParameters.from_text("")  # TF Serving's BasicBatchScheduler defaults
    assert (defaults.max_batch_size, defaults.batch_timeout_micros,
            defaults.max_enqueued_batches) == (1000, 0, 10)


def test_the_shipped_parameters_file_holds_what_served_best_where_measured():
    """serving/batching_parameters.txt is benchmarks/serving/batching_parameters.py's pick,
    committed in benchmarks/results/batching_parameters.json."""
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    measured = json.loads((root / "benchmarks/results/batching_parameters.json").read_text())
    shipped = BatchingParameters.from_file(str(root / "serving/batching_parameters.txt"))
    assert shipped == BatchingParameters.from_text(measured["best_parameters"])
    assert measured["best"] in measured["lone_client_within_10_percent"]


@pytest.mark.parametrize("text, message", [
    ("max_batch_size { value: 8 }\nbatch_size: 3", r"2:1 : .*no field named \"batch_size\""),
    ("max_batch_size: 8", r"1:\d+ : .*"),  # a wrapper field needs { value: ... }
    ("max_batch_size { value: 8 }\nallowed_batch_sizes: 4",
     r"the last entry of allowed_batch_sizes \(4\) must equal max_batch_size \(8\)"),
    ("max_batch_size { value: 8 }\nallowed_batch_sizes: 4\nallowed_batch_sizes: 2\n"
     "allowed_batch_sizes: 8", r"allowed_batch_sizes must be positive and increasing"),
    ("max_batch_size { value: 0 }", r"max_batch_size must be >= 1, got 0"),
])
def test_a_bad_parameters_file_is_refused_naming_the_problem(text, message):
    with pytest.raises(ValueError, match=rf"batching.config: {message}"):
        BatchingParameters.from_text(text, "batching.config")


class Recorder:
    """A signature stand-in: doubles `x`, reports the batch it ran in; blocks while `hold` is
    clear; fails on a negative value."""

    def __init__(self):
        self.sizes = []
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()

    def __call__(self, x, **others):
        self.started.set()
        self.hold.wait(60)
        self.sizes.append(int(x.shape[0]))
        tf.debugging.assert_non_negative(x, message="x must be >= 0")
        return {"y": x * 2, "batch": tf.fill(tf.shape(x)[:1], tf.shape(x)[0]),
                **{name: value for name, value in others.items()}}


def submit_all(batcher, function, requests, key="sig"):
    """Runs `requests` (feeds) from one thread each, at once; their results or exceptions."""
    results = [None] * len(requests)

    def one(index, feeds):
        try:
            results[index] = batcher.run(key, function, feeds)
        except Exception as error:  # noqa: BLE001 - compared below
            results[index] = error

    threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_concurrent_requests_are_merged_and_split_back_in_order():
    batcher = Batcher(BatchingParameters(max_batch_size=16, batch_timeout_micros=300_000,
                                         num_batch_threads=1))
    recorder = Recorder()
    try:
        requests = [{"x": tf.constant([i, i + 100], tf.int32)} for i in range(6)]
        results = submit_all(batcher, recorder, requests)
    finally:
        batcher.stop()
    for i, result in enumerate(results):
        assert result["y"].tolist() == [2 * i, 2 * i + 200]  # its own rows, in order
    assert sum(recorder.sizes) == 12 and len(recorder.sizes) < 6  # merged
    assert max(result["batch"][0] for result in results) > 2
    assert batcher.tasks_run == 6 and batcher.batches_run == len(recorder.sizes)


def test_a_batch_is_padded_to_an_allowed_size_and_cut_back():
    batcher = Batcher(BatchingParameters(max_batch_size=8, allowed_batch_sizes=(4, 8),
                                         num_batch_threads=1))
    recorder = Recorder()
    try:
        result = batcher.run("sig", recorder, {"x": tf.constant([5, 6, 7])})
    finally:
        batcher.stop()
    assert recorder.sizes == [4]  # 3 rows, padded with a copy of the first
    assert result["y"].tolist() == [10, 12, 14] and result["batch"].tolist() == [4, 4, 4]


def test_requests_too_large_without_a_batch_dimension_or_ragged_are_refused():
    batcher = Batcher(BatchingParameters(max_batch_size=4, num_batch_threads=1))
    recorder = Recorder()
    try:
        for feeds, code, message in (
                ({"x": tf.range(5)}, grpc.StatusCode.INVALID_ARGUMENT,
                 "Task size 5 is larger than maximum input batch size 4"),
                ({"x": tf.constant(3)}, grpc.StatusCode.INVALID_ARGUMENT,
                 "Batching Run() input tensors must have at least one dimension"),
                ({"x": tf.range(2), "k": tf.range(3)}, grpc.StatusCode.INVALID_ARGUMENT,
                 "Batching Run() input tensors must have equal 0th-dimension size")):
            with pytest.raises(ServingError) as caught:
                batcher.run("sig", recorder, feeds)
            assert (caught.value.code, caught.value.details) == (code, message)
        assert recorder.sizes == []  # none reached the model
    finally:
        batcher.stop()


def test_a_full_queue_is_unavailable_and_the_batcher_serves_on():
    batcher = Batcher(BatchingParameters(max_batch_size=1, max_enqueued_batches=1,
                                         num_batch_threads=1))
    recorder = Recorder()
    recorder.hold.clear()  # the batch thread stays busy with the first request
    try:
        first = threading.Thread(target=batcher.run, args=("sig", recorder, {"x": tf.range(1)}))
        first.start()
        assert recorder.started.wait(10)
        second = threading.Thread(target=batcher.run, args=("sig", recorder, {"x": tf.range(1)}))
        second.start()  # waits in the one batch the queue holds
        deadline = time.monotonic() + 10
        while not (batcher._open or batcher._closed) and time.monotonic() < deadline:
            time.sleep(0.01)  # (a full batch of 1 is closed at once: it waits as closed)
        with pytest.raises(ServingError) as caught:
            batcher.run("sig", recorder, {"x": tf.range(1)})
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert "The batch scheduling queue to which this task was submitted is full" in \
            caught.value.details
        recorder.hold.set()
        first.join(10)
        second.join(10)
        assert batcher.run("sig", recorder, {"x": tf.constant([4])})["y"].tolist() == [8]
        assert recorder.sizes == [1, 1, 1]
    finally:
        recorder.hold.set()
        batcher.stop()


def test_a_bad_request_fails_alone_and_merges_only_with_its_signature():
    batcher = Batcher(BatchingParameters(max_batch_size=16, batch_timeout_micros=300_000,
                                         num_batch_threads=1))
    recorder = Recorder()
    try:
        results = submit_all(batcher, recorder, [{"x": tf.constant([1, 2])},
                                                 {"x": tf.constant([-1])},
                                                 {"x": tf.constant([3])}])
        other = Recorder()
        mixed = [None, None]
        threads = [threading.Thread(target=lambda i=i, f=f, key=key: mixed.__setitem__(
            i, batcher.run(key, f, {"x": tf.constant([i])})))
            for i, (f, key) in enumerate(((recorder, "a"), (other, "b")))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        batcher.stop()
    assert results[0]["y"].tolist() == [2, 4] and results[2]["y"].tolist() == [6]
    assert isinstance(results[1], tf.errors.InvalidArgumentError)
    assert "x must be >= 0" in results[1].message
    assert [m["batch"].tolist() for m in mixed] == [[1], [1]]  # two signatures: two batches


def test_inputs_of_other_lengths_are_padded_only_when_asked():
    requests = [{"x": tf.constant([1]), "tokens": tf.constant([["a", "b", "c"]])},
                {"x": tf.constant([2]), "tokens": tf.constant([["d"]])}]
    for pad in (False, True):
        batcher = Batcher(BatchingParameters(max_batch_size=8, batch_timeout_micros=300_000,
                                             num_batch_threads=1,
                                             pad_variable_length_inputs=pad))
        try:
            results = submit_all(batcher, Recorder(), requests)
        finally:
            batcher.stop()
        if pad:
            assert results[1]["tokens"].tolist() == [[b"d", b"", b""]]
            assert results[0]["tokens"].tolist() == [[b"a", b"b", b"c"]]
        else:  # each runs alone once the merged batch fails
            assert results[1]["tokens"].tolist() == [[b"d"]]
            assert np.array_equal(results[0]["y"], [2])

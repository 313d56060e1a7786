"""The local TF Serving stand-in (tfformer.serving), its program (tfformer-serve), the client
(tfformer.serving.client) and its program (tfformer-translate).

Everything runs against a small stand-in SavedModel with the real model's serving contract
(``inputs``: string [batch] -> ``translations``: string [batch], ``scores``: float32 [batch];
``translate_nbest`` with ``k``: int32 [batch] -> [batch, max k] each), written here into tmp dirs: a
word-by-word dictionary "translator" whose version N > 1 prefixes ``vN:``, with a lookup table
(hence a ``__saved_model_init_op``) and a ``__slow__`` marker that makes a call busy-wait 1.5 s
(for the in-flight-at-shutdown test). Its n-best list (a "beam" of 3) is the translation, then
"TEXT #2", "TEXT #3", each scored 1 lower; k outside [1, 3] fails in the graph, as the export's.
All servers bind 127.0.0.1 on port 0.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from tfformer.cli import translate as translate_cli
from tfformer.export.warmup import WARMUP_FILE, warmup_requests, write_warmup_requests
from tfformer.serving import client, requests, server, versions

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "tfformer"
SLOW_SECONDS = 1.5
STANDIN_BEAM = 3
NBEST = "translate_nbest"


# --------------------------------------------------------------------------------------------
# The stand-in model


class _StandIn(tf.Module):
    def __init__(self, version: int):
        super().__init__()
        self.version = version
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(["hola", "mundo", "gato"],
                                                ["hello", "world", "cat"]),
            default_value="")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        slow = tf.reduce_any(tf.strings.regex_full_match(inputs, r".*__slow__.*"))
        start = tf.timestamp()
        end = start + tf.where(slow, tf.constant(SLOW_SECONDS, tf.float64),
                               tf.constant(0.0, tf.float64))
        waited = tf.while_loop(lambda t: t < end, lambda t: [tf.timestamp()], [start])[0]
        with tf.control_dependencies([waited]):
            def word(flat):
                found = self.table.lookup(flat)
                return tf.where(found == "", tf.strings.upper(flat, encoding="utf-8"), found)

            words = tf.ragged.map_flat_values(word, tf.strings.split(inputs))
            text = tf.strings.reduce_join(words, axis=-1, separator=" ")
            if self.version > 1:
                text = tf.strings.join([tf.fill(tf.shape(inputs), f"v{self.version}:"), text])
            length = tf.cast(tf.strings.length(inputs, unit="UTF8_CHAR"), tf.float32)
        return {"translations": text, "scores": -0.5 * float(self.version) * length}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                  tf.TensorSpec([None], tf.int32, name="k")])
    def translate_nbest(self, inputs, k):
        in_range = tf.debugging.Assert(
            tf.reduce_all(tf.logical_and(k >= 1, k <= STANDIN_BEAM)),
            [f"translate_nbest: k must be between 1 and the beam size ({STANDIN_BEAM}), got", k])
        with tf.control_dependencies([in_range]):
            best = self.translate(inputs)
        width = tf.reduce_max(tf.concat([k, [1]], 0))
        ranks = tf.range(width)
        shape = [tf.shape(inputs)[0], width]
        suffixes = tf.where(ranks == 0, "",
                            tf.strings.join([" #", tf.strings.as_string(ranks + 1)]))
        texts = tf.strings.join([tf.broadcast_to(best["translations"][:, None], shape),
                                 tf.broadcast_to(suffixes[None, :], shape)])
        wanted = ranks[None, :] < k[:, None]
        return {"translations": tf.where(wanted, texts, ""),
                "scores": tf.where(wanted, best["scores"][:, None]
                                   - tf.cast(ranks, tf.float32)[None, :], -float("inf"))}


def write_standin(version_dir, version: int) -> None:
    module = _StandIn(version)
    tf.saved_model.save(module, str(version_dir),
                        signatures={"serving_default": module.translate,
                                    "translate": module.translate,
                                    NBEST: module.translate_nbest})


def in_process(version_dir, sentences):
    """What calling the SavedModel in process returns: (texts as str, scores as float32)."""
    outputs = tf.saved_model.load(str(version_dir)).signatures["serving_default"](
        inputs=tf.constant(sentences, dtype=tf.string))
    return ([t.decode("utf-8") for t in outputs["translations"].numpy()],
            outputs["scores"].numpy())


# --------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def model_base(tmp_path_factory):
    """BASE/tfformer with versions 1 and 2 (for --saved-model), served at version 2 below."""
    base = tmp_path_factory.mktemp("models") / MODEL
    write_standin(base / "1", 1)
    write_standin(base / "2", 2)
    return base


@pytest.fixture(scope="module")
def handle(model_base):
    running = server.start_server(str(model_base), MODEL, port=0, poll_seconds=0)
    yield running
    running.stop(grace=1)


@pytest.fixture(scope="module")
def stub(handle):
    channel = grpc.insecure_channel(handle.address)
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def predict_request(values, dtype=tf.string, shape=None, model=MODEL, signature="",
                    input_name="inputs", version=None):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[input_name].CopyFrom(tf.make_tensor_proto(values, dtype=dtype, shape=shape))
    return request


def nbest_request(values, k, dtype=tf.int32, shape=None, **kwargs):
    """A translate_nbest request: `predict_request`'s, plus the input `k` (a number: the same k
    for every sentence, a vector [batch])."""
    request = predict_request(values, signature=NBEST, **kwargs)
    if shape is None and not isinstance(k, list):
        k = [k] * len(values)
    request.inputs["k"].CopyFrom(tf.make_tensor_proto(k, dtype=dtype, shape=shape))
    return request


def nbest_in_process(version_dir, sentences, k):
    """translate_nbest called in process: (texts [batch][k] as str, scores float32 [batch, k])."""
    outputs = tf.saved_model.load(str(version_dir)).signatures[NBEST](
        inputs=tf.constant(sentences, dtype=tf.string), k=tf.constant([k] * len(sentences)))
    return ([[t.decode("utf-8") for t in row] for row in outputs["translations"].numpy()],
            outputs["scores"].numpy())


def texts_and_scores(response):
    return ([t.decode("utf-8") for t in tf.make_ndarray(response.outputs["translations"])],
            tf.make_ndarray(response.outputs["scores"]))


def nbest_texts_and_scores(response):
    """An n-best response: (texts [batch][k] as str, scores float32 [batch, k])."""
    return ([[t.decode("utf-8") for t in row]
             for row in tf.make_ndarray(response.outputs["translations"])],
            tf.make_ndarray(response.outputs["scores"]))


def rpc_error(call, request):
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=60)  # a loaded 2-core machine may take >10 s
    return caught.value


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


# --------------------------------------------------------------------------------------------
# Round trip and metadata


def test_predict_round_trip_matches_the_saved_model_in_process(stub, model_base):
    sentences = ["hola mundo", "", "el gato  negro", "ñandú hola"]
    response = stub.Predict(predict_request(sentences), timeout=10)

    texts, scores = texts_and_scores(response)
    want_texts, want_scores = in_process(model_base / "2", sentences)
    assert texts == want_texts == ["v2:hello world", "v2:", "v2:EL cat NEGRO", "v2:ÑANDÚ hello"]
    assert scores.dtype == np.float32 and scores.tolist() == want_scores.tolist()
    # TF Serving fills the model spec it served and puts floats in float_val (AsProtoField).
    assert response.model_spec.name == MODEL
    assert response.model_spec.version.value == 2
    assert response.model_spec.signature_name == "serving_default"
    assert list(response.outputs["scores"].float_val) == want_scores.tolist()
    assert set(response.outputs) == {"translations", "scores"}


def test_translate_signature_alias_and_output_filter(stub):
    request = predict_request(["hola"], signature="translate")
    request.output_filter.append("scores")
    response = stub.Predict(request, timeout=10)
    assert set(response.outputs) == {"scores"}
    assert response.model_spec.signature_name == "translate"
    assert tf.make_ndarray(response.outputs["scores"]).tolist() == [-4.0]


def test_nbest_signature_takes_an_int_k_and_answers_k_per_sentence(stub, handle, model_base):
    sentences = ["hola mundo", "gato", ""]
    best_texts, best_scores = in_process(model_base / "2", sentences)
    for k in range(1, STANDIN_BEAM + 1):
        response = stub.Predict(nbest_request(sentences, k), timeout=10)
        texts, scores = nbest_texts_and_scores(response)
        want_texts, want_scores = nbest_in_process(model_base / "2", sentences, k)
        assert texts == want_texts and scores.tolist() == want_scores.tolist()
        assert scores.shape == (3, k) and response.model_spec.signature_name == NBEST
        assert [row[0] for row in texts] == best_texts  # the first column is serving_default's
        assert scores[:, 0].tolist() == best_scores.tolist()
    assert texts[:2] == [["v2:hello world", "v2:hello world #2", "v2:hello world #3"],
                         ["v2:cat", "v2:cat #2", "v2:cat #3"]]

    got = client.translate_nbest(sentences, 2, server=handle.address, batch_size=2)
    assert got[:2] == [[client.Translation("v2:hello world", -10.0),
                        client.Translation("v2:hello world #2", -11.0)],
                       [client.Translation("v2:cat", -4.0), client.Translation("v2:cat #2", -5.0)]]
    assert [[t.text for t in row] for row in got] == nbest_in_process(model_base / "2",
                                                                      sentences, 2)[0]
    assert client.translate_saved_model_nbest(sentences, 2, str(model_base / "2")) == got
    # a k per sentence: each its own number of hypotheses, in process and over gRPC alike
    ks = [1, 3, 2][:len(sentences)]
    mixed = client.translate_nbest(sentences, ks, server=handle.address, batch_size=2)
    assert [len(row) for row in mixed] == ks
    assert [row[:k] for row, k in zip(nbest_in_process(model_base / "2", sentences, 3)[0], ks)] \
        == [[t.text for t in row] for row in mixed]
    assert client.translate_saved_model_nbest(sentences, ks, str(model_base / "2")) == mixed
    with pytest.raises(client.TranslationError) as caught:
        client.translate_nbest(["hola"], STANDIN_BEAM + 1, server=handle.address)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    # The graph's own message first, as TF Serving answers it (no eager-call preamble).
    assert caught.value.details.startswith(
        "assertion failed: [translate_nbest: k must be between 1 and the beam size (3), got] [4]")
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        client.translate_nbest(["hola"], 0, server=handle.address)


def test_client_translate_matches_in_process_and_reuses_a_channel(handle, model_base):
    sentences = [f"hola {i}" for i in range(5)] + ["mundo"]
    want_texts, want_scores = in_process(model_base / "2", sentences)
    with grpc.insecure_channel(handle.address) as channel:
        got = client.translate(sentences, model=MODEL, channel=channel, batch_size=4)
        again = client.translate(["gato"], channel=channel)  # the channel is left open
    assert [t.text for t in got] == want_texts
    assert [t.score for t in got] == pytest.approx(want_scores.tolist())
    assert again == [client.Translation("v2:cat", -4.0)]
    assert client.translate([], server=handle.address) == []
    with pytest.raises(TypeError):
        client.translate("hola mundo", server=handle.address)


def test_get_model_metadata_lists_the_signature_without_the_init_op(stub, model_base):
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((model_base / "2" / "saved_model.pb").read_bytes())
    assert "__saved_model_init_op" in saved_model.meta_graphs[0].signature_def  # hidden below

    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = MODEL
    request.metadata_field.append("signature_def")
    response = stub.GetModelMetadata(request, timeout=10)

    assert response.model_spec.name == MODEL and response.model_spec.version.value == 2
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_map)
    assert set(signature_map.signature_def) == {"serving_default", "translate", NBEST}
    nbest = signature_map.signature_def[NBEST]
    assert {k: (v.dtype, [d.size for d in v.tensor_shape.dim]) for k, v in nbest.inputs.items()} \
        == {"inputs": (tf.string.as_datatype_enum, [-1]), "k": (tf.int32.as_datatype_enum, [-1])}
    assert [d.size for d in nbest.outputs["translations"].tensor_shape.dim] == [-1, -1]
    signature = signature_map.signature_def["serving_default"]
    assert signature.method_name == "tensorflow/serving/predict"
    assert {k: v.dtype for k, v in signature.inputs.items()} == {
        "inputs": tf.string.as_datatype_enum}
    assert {k: v.dtype for k, v in signature.outputs.items()} == {
        "translations": tf.string.as_datatype_enum, "scores": tf.float32.as_datatype_enum}
    assert [d.size for d in signature.inputs["inputs"].tensor_shape.dim] == [-1]


def test_graph_errors_are_answered_in_tf_servings_words():
    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def positive(k):
        with tf.control_dependencies([tf.debugging.Assert(k > 0, ["k must be > 0, got", k])]):
            return tf.identity(k)

    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        positive(tf.constant(-2))
    assert caught.value.message.startswith("Graph execution error:")  # + nodes, stack traces
    error = requests.serving_error(caught.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith("assertion failed: [k must be > 0, got] [-2]")
    assert requests.op_error_message(tf.errors.NotFoundError(None, None, "plain")) == "plain"


def test_get_model_status_reports_the_available_version(handle):
    with grpc.insecure_channel(handle.address) as channel:
        status_stub = model_service_pb2_grpc.ModelServiceStub(channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = MODEL
        response = status_stub.GetModelStatus(request, timeout=10)
        assert [(s.version, s.state) for s in response.model_version_status] == [
            (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
        request.model_spec.name = "nope"
        assert rpc_error(status_stub.GetModelStatus, request).code() == grpc.StatusCode.NOT_FOUND


# --------------------------------------------------------------------------------------------
# Bad requests: each gets a defined status, and the server keeps serving


def _over_limit_batch():
    return predict_request(["hola"] * (server.DEFAULT_MAX_BATCH_SIZE + 1))


def _unknown_output():
    request = predict_request(["hola"])
    request.output_filter.append("logits")
    return request


def _missing_input():
    request = predict_request(["hola"])
    del request.inputs["inputs"]
    return request


def _k_to_serving_default():
    request = nbest_request(["hola"], 2)
    request.model_spec.signature_name = "serving_default"
    return request


def _version_label():
    request = predict_request(["hola"])
    request.model_spec.version_label = "stable"
    return request


BAD_REQUESTS = {
    "wrong dtype": (lambda: predict_request([1.0], dtype=tf.float32),
                    grpc.StatusCode.INVALID_ARGUMENT, "expected dtype DT_STRING but got DT_FLOAT"),
    "scalar (rank 0)": (lambda: predict_request("hola mundo"),
                        grpc.StatusCode.INVALID_ARGUMENT, "(rank 0) is not compatible"),
    "rank 2": (lambda: predict_request([["hola"]]),
               grpc.StatusCode.INVALID_ARGUMENT, "(rank 2) is not compatible"),
    "empty batch": (lambda: predict_request([], shape=[0]),
                    grpc.StatusCode.INVALID_ARGUMENT, "empty batch"),
    "100,000 characters": (lambda: predict_request(["hola", "a" * 100_000]),
                           grpc.StatusCode.INVALID_ARGUMENT,
                           '"inputs"[1]: 100000 characters exceeds the maximum of 1000'),
    "invalid UTF-8": (lambda: predict_request([b"hola", b"mundo", b"caf\xe9"]),
                      grpc.StatusCode.INVALID_ARGUMENT, '"inputs"[2]: not valid UTF-8'),
    "batch over the limit": (_over_limit_batch, grpc.StatusCode.INVALID_ARGUMENT,
                             "batch size 65 exceeds the maximum of 64"),
    "unknown input name": (lambda: predict_request(["hola"], input_name="text"),
                           grpc.StatusCode.INVALID_ARGUMENT,
                           "input tensor alias not found in signature: text"),
    "missing input": (_missing_input, grpc.StatusCode.INVALID_ARGUMENT,
                      "Missing but required: {inputs}"),
    "unknown output filter": (_unknown_output, grpc.StatusCode.INVALID_ARGUMENT,
                              "output tensor alias not found in signature: logits"),
    "unknown model": (lambda: predict_request(["hola"], model="nope"),
                      grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(nope)"),
    "unloaded version": (lambda: predict_request(["hola"], version=7),
                         grpc.StatusCode.NOT_FOUND,
                         "Servable not found for request: Specific(tfformer, 7)"),
    "version label": (_version_label, grpc.StatusCode.INVALID_ARGUMENT,
                      "Unrecognized servable version label: stable"),
    "unknown signature": (lambda: predict_request(["hola"], signature="nope"),
                          grpc.StatusCode.FAILED_PRECONDITION,
                          'Serving signature key "nope" not found.'),
    # translate_nbest's k: the range is checked by the model's graph, the rest before it.
    "k = 0": (lambda: nbest_request(["hola"], 0), grpc.StatusCode.INVALID_ARGUMENT,
              "assertion failed: [translate_nbest: k must be between 1 and the beam size (3), "
              "got] [0]"),
    "k over the beam size": (lambda: nbest_request(["hola", "gato"], 4),
                             grpc.StatusCode.INVALID_ARGUMENT,
                             "assertion failed: [translate_nbest: k must be between 1 and the "
                             "beam size (3), got] [4 4]"),
    "k of dtype int64": (lambda: nbest_request(["hola"], 2, dtype=tf.int64),
                         grpc.StatusCode.INVALID_ARGUMENT,
                         'input "k": expected dtype DT_INT32 but got DT_INT64'),
    "k as a float": (lambda: nbest_request(["hola"], 2.0, dtype=tf.float32),
                     grpc.StatusCode.INVALID_ARGUMENT,
                     'input "k": expected dtype DT_INT32 but got DT_FLOAT'),
    "k as a scalar": (lambda: nbest_request(["hola"], 2, shape=[]),
                      grpc.StatusCode.INVALID_ARGUMENT,
                      'input "k": shape () (rank 0) is not compatible'),
    "k missing": (lambda: predict_request(["hola"], signature=NBEST),
                  grpc.StatusCode.INVALID_ARGUMENT, "Missing but required: {k}"),
    "k sent to serving_default": (_k_to_serving_default, grpc.StatusCode.INVALID_ARGUMENT,
                                  "Sent extra: {k}"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_predict_requests_get_a_defined_status_and_the_server_keeps_serving(stub, case):
    make_request, code, details = BAD_REQUESTS[case]
    error = rpc_error(stub.Predict, make_request())
    assert error.code() == code
    assert details in error.details()
    texts, _ = texts_and_scores(stub.Predict(predict_request(["hola"]), timeout=10))
    assert texts == ["v2:hello"]


def test_empty_string_is_a_valid_input(stub, model_base):
    texts, scores = texts_and_scores(stub.Predict(predict_request(["", "hola"]), timeout=10))
    assert (texts, scores.tolist()) == (["v2:", "v2:hello"], [0.0, -4.0])
    assert texts == in_process(model_base / "2", ["", "hola"])[0]


def test_limits_are_inclusive(stub):
    # 1000 characters (2000 bytes) each, in the largest batch: both limits are inclusive.
    request = predict_request(["é" * 1000] * server.DEFAULT_MAX_BATCH_SIZE)
    texts, _ = texts_and_scores(stub.Predict(request, timeout=10))
    assert texts == ["v2:" + "É" * 1000] * server.DEFAULT_MAX_BATCH_SIZE


def test_unimplemented_and_invalid_metadata_calls(stub):
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = MODEL
    assert rpc_error(stub.Classify, classify).code() == grpc.StatusCode.UNIMPLEMENTED
    regress = regression_pb2.RegressionRequest()
    assert rpc_error(stub.Regress, regress).code() == grpc.StatusCode.UNIMPLEMENTED
    multi = inference_pb2.MultiInferenceRequest()
    assert rpc_error(stub.MultiInference, multi).code() == grpc.StatusCode.UNIMPLEMENTED

    metadata = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata.model_spec.name = MODEL
    metadata.metadata_field.append("graph")
    error = rpc_error(stub.GetModelMetadata, metadata)
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                               "Metadata field graph is not supported")
    del metadata.metadata_field[:]
    assert rpc_error(stub.GetModelMetadata, metadata).code() == grpc.StatusCode.INVALID_ARGUMENT
    texts, _ = texts_and_scores(stub.Predict(predict_request(["mundo"]), timeout=10))
    assert texts == ["v2:world"]


# --------------------------------------------------------------------------------------------
# Concurrency


def test_500_requests_from_16_threads_all_answer_correctly(stub, model_base):
    pool = ["hola", "mundo", "gato", "hola mundo", "perro", "el gato", "", "ñu", "casa grande",
            "hola gato mundo", "uno dos tres", "x"]
    want_texts, want_scores = in_process(model_base / "2", pool)
    expected = {s: (t, float(sc)) for s, t, sc in zip(pool, want_texts, want_scores, strict=True)}

    def one(i):
        batch = [pool[(i + j) % len(pool)] for j in range(1 + i % 4)]
        texts, scores = texts_and_scores(stub.Predict(predict_request(batch), timeout=30))
        return batch, list(zip(texts, scores.tolist(), strict=True))

    with futures.ThreadPoolExecutor(max_workers=16) as executor:
        results = list(executor.map(one, range(500)))
    assert len(results) == 500
    for batch, got in results:
        assert got == [expected[s] for s in batch]


# --------------------------------------------------------------------------------------------
# Versions


def _wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def test_new_version_is_picked_up_and_a_broken_one_is_not(tmp_path, caplog):
    caplog.set_level("INFO", logger="tfformer.serving")
    base = tmp_path / MODEL
    write_standin(base / "1", 1)
    running = server.start_server(str(base), MODEL, port=0, poll_seconds=0.2)
    try:
        with grpc.insecure_channel(running.address) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

            def served():
                response = stub.Predict(predict_request(["hola"]), timeout=10)
                return response.model_spec.version.value, texts_and_scores(response)[0]

            assert served() == (1, ["hello"])
            write_standin(base / "2", 2)  # written in place while serving
            _wait_for(lambda: served()[0] == 2)
            assert served() == (2, ["v2:hello"])
            old = rpc_error(stub.Predict, predict_request(["hola"], version=1))
            assert old.code() == grpc.StatusCode.NOT_FOUND
            assert "Specific(tfformer, 1)" in old.details()
            pinned = stub.Predict(predict_request(["hola"], version=2), timeout=10)
            assert texts_and_scores(pinned)[0] == ["v2:hello"]

            # A new version that fails to load is logged; version 2 keeps serving.
            (base / "3").mkdir()
            (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
            _wait_for(lambda: any("Failed to load servable tfformer version 3" in r.getMessage()
                                  for r in caplog.records))
            assert served() == (2, ["v2:hello"])
    finally:
        running.stop(grace=1)


def standin_warmup_calls(k):
    """A warmup request per signature of the stand-in, on "hola", k for translate_nbest."""
    return {"serving_default": {"inputs": ["hola"]}, "translate": {"inputs": ["hola"]},
            NBEST: {"inputs": ["hola"], "k": [k]}}


def test_a_version_replays_its_warmup_requests_before_it_serves(tmp_path, caplog):
    caplog.set_level("INFO", logger="tfformer.serving")
    base = tmp_path / MODEL
    write_standin(base / "1", 1)
    write_warmup_requests(base / "1", warmup_requests(MODEL, standin_warmup_calls(STANDIN_BEAM)))
    with server.start_server(str(base), MODEL, port=0, poll_seconds=0) as running:
        assert running.manager.current.warmup_requests == 3
        assert "Serving servable tfformer version 1 after 3 warmup request(s)" in caplog.text
        with grpc.insecure_channel(running.address) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            assert texts_and_scores(stub.Predict(predict_request(["hola"]), timeout=10))[0] \
                == ["hello"]


@pytest.mark.parametrize("case", ["k over the beam", "unknown signature", "not TFRecords"])
def test_a_warmup_request_that_fails_fails_the_load(tmp_path, case):
    """As in TF Serving: the requests run on the model, and the version does not serve when one
    fails."""
    version = tmp_path / "1"
    write_standin(version, 1)
    requests = warmup_requests(MODEL, standin_warmup_calls(
        STANDIN_BEAM + (case == "k over the beam")))
    if case == "unknown signature":
        requests[0].model_spec.signature_name = "nope"
    write_warmup_requests(version, requests)
    if case == "not TFRecords":
        (version / WARMUP_FILE).write_bytes(b"not a TFRecord file")
    message = {"k over the beam": r"(?s)warmup request 3 \(translate_nbest\) failed: .*k must be "
                                  r"between 1 and the beam size \(3\)",
               "unknown signature": r"warmup request 1 names signature 'nope', which the "
                                    r"SavedModel lacks",
               "not TFRecords": r"tf_serving_warmup_requests: not a TFRecord file"}[case]
    with pytest.raises(ValueError, match=message):
        versions.load_version(str(version), 1)


def test_start_server_without_a_version_fails_clearly(tmp_path):
    (tmp_path / MODEL / "not-a-version").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no version directory"):
        server.start_server(str(tmp_path / MODEL), port=0)


# --------------------------------------------------------------------------------------------
# Process: SIGTERM while a request is in flight


class _Lines:
    """Lines of a subprocess's merged stdout/stderr, read by a thread."""

    def __init__(self, stream):
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.lines.put(line)

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line matching {pattern!r}; output:\n"
                                     + "".join(self.seen))
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match


@contextlib.contextmanager
def server_program(*args):
    """`python -m tfformer.cli.serve ARGS` on a free port: yields (process, output lines, port);
    the process is killed on the way out whatever happened."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tfformer.cli.serve", "--port", "0", *args],
        cwd=REPO_ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        output = _Lines(process.stdout)
        port = output.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1)
        yield process, output, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_in_flight_request_and_exits_0(model_base, signum):
    with server_program("--model-base-path", str(model_base), "--log-level", "DEBUG",
                        "--grace-seconds", "20") as (process, output, port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            in_flight = stub.Predict.future(predict_request(["hola __slow__"]), timeout=30)
            output.wait_for(r"Predict tfformer version 2", 20)  # the model call has started
            process.send_signal(signum)
            texts, _ = texts_and_scores(in_flight.result())
            assert texts == ["v2:hello __SLOW__"]
        assert process.wait(timeout=20) == 0
        output.wait_for(f"Received {signal.Signals(signum).name}", 5)
        output.wait_for(r"Server stopped", 5)


def test_server_program_applies_its_flags_and_swaps_in_a_version_renamed_into_place(tmp_path):
    base = tmp_path / "models" / MODEL
    write_standin(base / "1", 1)
    with server_program("--model-base-path", str(base), "--model-name", "custom",
                        "--max-batch-size", "2", "--max-input-chars", "10",
                        "--poll-seconds", "0.2", "--tensorflow-intra-op-parallelism", "1",
                        "--tensorflow-inter-op-parallelism", "1") as (process, output, port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

            def served():
                response = stub.Predict(predict_request(["hola"], model="custom"), timeout=10)
                return response.model_spec.version.value, texts_and_scores(response)[0]

            assert served() == (1, ["hello"])
            assert any("TensorFlow thread pools: intra-op 1, inter-op 1" in line
                       for line in output.seen)  # logged before "listening on"
            # TensorFlow names its inter-op pool's threads tf_Compute (one per core by default).
            names = []
            for task in os.listdir(f"/proc/{process.pid}/task"):
                with open(f"/proc/{process.pid}/task/{task}/comm") as comm:
                    names.append(comm.read().strip())
            assert names.count("tf_Compute") == 1, names
            assert rpc_error(stub.Predict, predict_request(["hola"])).code() == \
                grpc.StatusCode.NOT_FOUND  # the default name is not served under --model-name
            for request, details in (
                    (predict_request(["a", "b", "c"], model="custom"),
                     "batch size 3 exceeds the maximum of 2"),
                    (predict_request(["a" * 11], model="custom"),
                     '"inputs"[0]: 11 characters exceeds the maximum of 10')):
                error = rpc_error(stub.Predict, request)
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert details in error.details()
            assert texts_and_scores(stub.Predict(
                predict_request(["a" * 10, "b"], model="custom"), timeout=10))[0] == \
                ["A" * 10, "B"]  # the limits are inclusive

            extra = predict_request(["hola"], model="custom")
            extra.inputs["extra"].CopyFrom(tf.make_tensor_proto(["x"]))
            error = rpc_error(stub.Predict, extra)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "Sent extra: {extra}" in error.details()  # as TF Serving words it

            # A new version written aside (a name that is no version) and renamed into place.
            write_standin(base.parent / ".staging-2", 2)
            time.sleep(0.5)  # a poll or two sees the staging dir and ignores it
            assert served() == (1, ["hello"])
            os.rename(base.parent / ".staging-2", base / "2")
            _wait_for(lambda: served()[0] == 2)
            assert served() == (2, ["v2:hello"])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


@pytest.mark.parametrize("pool", ["intra", "inter"])
def test_a_negative_thread_pool_size_exits_2_naming_the_flag(pool, tmp_path, caplog):
    from tfformer.cli.serve import main

    flag = f"--tensorflow-{pool}-op-parallelism"
    assert main(["--model-base-path", str(tmp_path), flag, "-1"]) == 2
    assert f"{flag} must be 0 (TensorFlow's default) or more, got -1" in caplog.text


def test_server_program_exits_2_on_a_model_base_path_without_versions(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.serve", "--model-base-path", str(tmp_path / "nope"),
         "--port", "0"],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"no version directory (e.g. {tmp_path / 'nope' / '1'})" in result.stderr


def test_server_program_exits_1_when_its_only_version_fails_to_load(tmp_path):
    base = tmp_path / MODEL
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.serve", "--model-base-path", str(base), "--port", "0"],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "Failed to load servable tfformer version 1" in result.stderr
    assert "failed to load" in result.stderr.splitlines()[-1]


# --------------------------------------------------------------------------------------------
# CLI


def test_cli_arguments_with_scores(handle, capsys):
    code = translate_cli.main(["--server", handle.address, "--scores", "hola mundo", "gato"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == "-10\tv2:hello world\n-4\tv2:cat\n"


def test_cli_nbest_prints_k_scored_lines_per_sentence_from_a_server_or_a_saved_model(
        handle, model_base, capsys):
    want = "-10\tv2:hello world\n-11\tv2:hello world #2\n-4\tv2:cat\n-5\tv2:cat #2\n"
    for where in (["--server", handle.address], ["--saved-model", str(model_base)]):
        assert translate_cli.main([*where, "--nbest", "2", "hola mundo", "gato"]) == 0
        assert capsys.readouterr() == (want, "")
        # Over the beam size: refused by the model (its graph), bad input either way.
        assert translate_cli.main([*where, "--nbest", "4", "hola"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "INVALID_ARGUMENT" in err
        assert (": assertion failed: [translate_nbest: k must be between 1 and the beam size (3), "
                "got] [4]") in err
    assert translate_cli.main(["--server", handle.address, "--nbest", "1", "--signature",
                               "serving_default", "hola"]) == 2  # a signature without k
    # Refused by the client, before any request: the contract names each signature's inputs.
    assert "serving_default takes no other input besides inputs, not k" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        translate_cli.main(["--server", handle.address, "--nbest", "0", "hola"])
    assert exit_info.value.code == 2
    assert "--nbest must be at least 1" in capsys.readouterr().err


def test_cli_stdin_keeps_order_and_blank_lines_across_batches(handle, capsys, monkeypatch):
    lines = ["hola", "", "mundo", "el gato", "ñu", "perro"]
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    code = translate_cli.main(["--server", handle.address, "--batch-size", "4"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.split("\n") == ["v2:hello", "v2:", "v2:world", "v2:EL cat", "v2:ÑU", "v2:PERRO", ""]


def test_cli_stdin_in_a_subprocess(handle):
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.translate", "--server", handle.address],
        input="hola mundo\nñandú\n".encode("utf-8"), capture_output=True, cwd=REPO_ROOT,
        env=subprocess_env(), timeout=60)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout.decode("utf-8") == "v2:hello world\nv2:ÑANDÚ\n"


def test_cli_saved_model_mode_takes_a_version_dir_or_the_highest_version(model_base, capsys):
    assert translate_cli.main(["--saved-model", str(model_base / "1"), "hola mundo"]) == 0
    assert capsys.readouterr().out == "hello world\n"
    assert translate_cli.main(["--saved-model", str(model_base), "--scores", "hola mundo"]) == 0
    assert capsys.readouterr().out == "-10\tv2:hello world\n"
    assert translate_cli.main(["--saved-model", str(model_base / "nope"), "hola"]) == 2
    assert "neither a SavedModel directory nor a model base path" in capsys.readouterr().err


def test_cli_unreachable_server_exits_non_zero_with_a_clear_message():
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "tfformer.cli.translate", "--server", f"127.0.0.1:{port}",
         "--timeout", "3", "hola"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=subprocess_env(), timeout=60)
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"tfformer-translate: error: UNAVAILABLE from 127.0.0.1:{port}" in result.stderr


def test_cli_server_side_rejection_is_bad_input_exit_2(handle, capsys):
    assert translate_cli.main(["--server", handle.address, "x" * 1001]) == 2
    err = capsys.readouterr().err
    assert "INVALID_ARGUMENT" in err and "exceeds the maximum of 1000" in err
    assert translate_cli.main(["--server", handle.address, "--model", "nope", "hola"]) == 2
    assert "NOT_FOUND" in capsys.readouterr().err


def test_translation_error_carries_code_and_details(handle):
    with pytest.raises(client.TranslationError) as caught:
        client.translate(["hola"], server=handle.address, signature="nope")
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details == 'Serving signature key "nope" not found.'


def test_stand_alone_grpc_client_example_translates_without_tfformer(handle, model_base):
    example = os.path.join(REPO_ROOT, "serving", "grpc_client_example.py")
    # Run from serving/ with no PYTHONPATH, and fail on any import of tfformer.
    code = ("import sys, runpy; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    guard = ("import sys; sys.modules['tfformer'] = None; " + code)
    result = subprocess.run(
        [sys.executable, "-c", guard, example, "--server", handle.address, "--model", MODEL,
         "hola mundo", "gato"],
        capture_output=True, text=True, timeout=120, cwd=os.path.join(REPO_ROOT, "serving"),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, result.stderr[-2000:]
    texts, scores = in_process(model_base / "2", ["hola mundo", "gato"])
    assert result.stdout.splitlines() == [f"{s:.4f}\t{t}" for t, s in zip(texts, scores)]


# --------------------------------------------------------------------------------------------
# Request batching


def test_batching_merges_concurrent_requests_over_grpc_and_rest(model_base):
    from tests.test_rest import rest
    from tfformer.serving.batching import BatchingParameters

    sentences = [[f"hola {i}", "gato"] for i in range(6)]
    batching = BatchingParameters(max_batch_size=32, batch_timeout_micros=300_000,
                                  num_batch_threads=1)
    with server.start_server(str(model_base), MODEL, port=0, poll_seconds=0, workers=8,
                             rest_api_port=0, batching=batching) as running:
        with futures.ThreadPoolExecutor(8) as pool:
            grpc_answers = list(pool.map(
                lambda batch: client.translate(batch, server=running.address, timeout=30),
                sentences[:4]))
            nbest = list(pool.map(
                lambda k: client.translate_nbest(["gato", "hola"], k, server=running.address,
                                                 timeout=30), [1, 3]))
            rest_answers = list(pool.map(
                lambda batch: rest(running, "/v1/models/tfformer:predict",
                                   {"instances": batch}), sentences[4:]))
        merged = running.batcher.batches_run
        tasks = running.batcher.tasks_run
    for batch, answer in zip(sentences, grpc_answers):
        texts, scores = in_process(model_base / "2", batch)
        assert [t.text for t in answer] == texts and [t.score for t in answer] == scores.tolist()
    for batch, (status, body) in zip(sentences[4:], rest_answers):
        assert status == 200
        assert [p["translations"] for p in body["predictions"]] == in_process(
            model_base / "2", batch)[0]
    # merged with a request for 3 hypotheses, the one for 1 still gets 1
    assert [[len(row) for row in answer] for answer in nbest] == [[1, 1], [3, 3]]
    assert [row[0].text for row in nbest[0]] == [row[0].text for row in nbest[1]]
    assert tasks == 8 and merged < tasks  # requests were merged


def test_serve_program_refuses_bad_batching_settings(tmp_path, model_base, caplog):
    from tfformer.cli import serve as serve_cli

    assert serve_cli.main(["--model-base-path", str(model_base), "--port", "0",
                           "--batching-parameters-file", "x.config"]) == 2
    assert "--batching-parameters-file needs --enable-batching" in caplog.text
    bad = tmp_path / "batching.config"
    bad.write_text("max_batch_size { value: 8 }\nbatch_threads { value: 2 }\n")
    assert serve_cli.main(["--model-base-path", str(model_base), "--port", "0",
                           "--enable-batching", "--batching-parameters-file", str(bad)]) == 2
    assert f"{bad}: 2:1 : " in caplog.text and "batch_threads" in caplog.text

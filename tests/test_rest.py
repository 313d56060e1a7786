"""TF Serving's REST API on the local server (tfformer.serving.rest, tfformer-serve
--rest-api-port): each endpoint, both request formats, the same answers and errors as gRPC.

Runs against tests/test_server.py's stand-in SavedModel (versions 1 and 2, serving 2), over
urllib; all servers bind 127.0.0.1 on port 0 (or a free port for the program).
"""

from __future__ import annotations

import base64
import http.client
import json
import select
import signal
import socket
import threading
import time
import types
import urllib.error
import urllib.request
from concurrent import futures

import grpc
import numpy as np
import pytest
from google.protobuf import json_format
from tensorflow_serving.apis import get_model_metadata_pb2

from tests import test_server
from tests.test_server import (
    MODEL,
    NBEST,
    free_port,
    in_process,
    nbest_request,
    nbest_texts_and_scores,
    predict_request,
    rpc_error,
    server_program,
    texts_and_scores,
)
from tfformer.cli import serve as serve_cli
from tfformer.serving import rest as rest_module
from tfformer.serving import server
from tfformer.serving.rest import array_to_json

PREDICT = f"/v1/models/{MODEL}:predict"

# The gRPC tests' fixtures: their stand-in model, and a gRPC stub on `handle` below.
model_base = test_server.model_base
stub = test_server.stub


@pytest.fixture(scope="module")
def handle(model_base):
    running = server.start_server(str(model_base), MODEL, port=0, poll_seconds=0,
                                  rest_api_port=0)
    yield running
    running.stop(grace=1)


def call(address, path, body=None, method=None):
    """(HTTP status, parsed JSON answer); ``body``: bytes as they are, else sent as JSON."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"] == "application/json"
            return response.status, json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        assert error.headers["Content-Type"] == "application/json"
        return error.code, json.loads(error.read().decode("utf-8"))


def rest(handle, path, body=None, method=None):
    return call(handle.rest_address, path, body, method)


def assert_still_serving(handle):
    assert rest(handle, PREDICT, {"instances": ["hola"]}) == (
        200, {"predictions": [{"translations": "v2:hello", "scores": -4.0}]})


# --------------------------------------------------------------------------------------------
# Predict: both formats, equal to gRPC


SENTENCES = ["hola mundo", "", "el gato  negro", "ñandú hola"]


def test_row_format_equals_grpc_and_the_saved_model(handle, stub, model_base):
    status, answer = rest(handle, PREDICT, {"instances": SENTENCES})
    assert status == 200 and set(answer) == {"predictions"}
    texts = [p["translations"] for p in answer["predictions"]]
    scores = np.array([p["scores"] for p in answer["predictions"]], np.float32)
    want_texts, want_scores = texts_and_scores(stub.Predict(predict_request(SENTENCES),
                                                            timeout=10))
    assert texts == want_texts == in_process(model_base / "2", SENTENCES)[0]
    assert texts[3] == "v2:ÑANDÚ hello"  # UTF-8 JSON strings both ways
    assert scores.tolist() == want_scores.tolist()
    assert all(set(p) == {"translations", "scores"} for p in answer["predictions"])


def test_columnar_format_and_named_inputs_give_the_same_outputs(handle, stub):
    want_texts, want_scores = texts_and_scores(stub.Predict(predict_request(SENTENCES),
                                                            timeout=10))
    want = (200, {"outputs": {"translations": want_texts, "scores": want_scores.tolist()}})
    assert rest(handle, PREDICT, {"inputs": SENTENCES}) == want
    assert rest(handle, PREDICT, {"inputs": {"inputs": SENTENCES}}) == want
    assert rest(handle, PREDICT, {"signature_name": "serving_default",
                                  "inputs": {"inputs": SENTENCES}}) == want
    # Row format with named inputs and base64 strings, on the "translate" signature.
    named = [{"inputs": "hola"}, {"inputs": {"b64": base64.b64encode(b"gato").decode()}}]
    assert rest(handle, PREDICT, {"signature_name": "translate", "instances": named}) == (
        200, {"predictions": [{"translations": "v2:hello", "scores": -4.0},
                              {"translations": "v2:cat", "scores": -4.0}]})


def test_nbest_takes_both_formats_with_a_k_per_sentence_and_equals_grpc(handle, stub):
    ks = [2] + [1] * (len(SENTENCES) - 1)
    texts, scores = nbest_texts_and_scores(stub.Predict(nbest_request(SENTENCES, ks), timeout=10))
    assert texts[0] == ["v2:hello world", "v2:hello world #2"]
    assert texts[2] == ["v2:EL cat NEGRO", ""] and scores[2, 1] == -np.inf  # past its k
    want = {"translations": texts, "scores": scores.tolist()}
    assert rest(handle, PREDICT, {"signature_name": NBEST,
                                  "inputs": {"inputs": SENTENCES, "k": ks}}) == (
        200, {"outputs": want})
    # the row format: k beside each sentence; -inf written as TF Serving writes it
    status, answer = rest(handle, PREDICT, {"signature_name": NBEST, "instances": [
        {"inputs": sentence, "k": k} for sentence, k in zip(SENTENCES, ks)]})
    assert status == 200 and answer == {"predictions": [
        {"translations": t, "scores": s} for t, s in zip(want["translations"], want["scores"])]}
    # a k for the whole request (a scalar) is what TF Serving's batching cannot merge
    status, answer = rest(handle, PREDICT, {"signature_name": NBEST,
                                            "inputs": {"inputs": ["hola"], "k": 2}})
    assert status == 400 and 'input "k": shape () (rank 0) is not compatible' in answer["error"]
    assert_still_serving(handle)


def test_version_paths_and_labels(handle):
    assert rest(handle, f"/v1/models/{MODEL}/versions/2:predict", {"inputs": ["gato"]}) == (
        200, {"outputs": {"translations": ["v2:cat"], "scores": [-4.0]}})
    assert rest(handle, f"/v1/models/{MODEL}/versions/1:predict", {"inputs": ["gato"]}) == (
        404, {"error": "Servable not found for request: Specific(tfformer, 1)"})
    # No labels are configured: TF Serving's answer for an unknown one, as over gRPC.
    assert rest(handle, f"/v1/models/{MODEL}/labels/stable:predict", {"inputs": ["gato"]}) == (
        400, {"error": "Unrecognized servable version label: stable"})


def test_floats_are_written_as_float32_reads_them():
    assert array_to_json(np.array([-1.73, 0.1], np.float32), "scores") == [-1.73, 0.1]
    assert array_to_json(np.array([[b"a"], [b"\xc3\xb1"]], object), "t") == [["a"], ["ñ"]]
    assert array_to_json(np.array([b"\xff"], object), "t_bytes") == [{"b64": "/w=="}]


def test_concurrent_rest_and_grpc_requests_all_answer_correctly(handle, stub):
    def one(i):
        sentence = ["hola", "mundo", "gato", "perro"][i % 4]
        if i % 2:
            return sentence, texts_and_scores(stub.Predict(predict_request([sentence]),
                                                           timeout=30))[0][0]
        status, answer = rest(handle, PREDICT, {"instances": [sentence]})
        assert status == 200
        return sentence, answer["predictions"][0]["translations"]

    with futures.ThreadPoolExecutor(max_workers=8) as executor:
        results = list(executor.map(one, range(64)))
    want = {"hola": "v2:hello", "mundo": "v2:world", "gato": "v2:cat", "perro": "v2:PERRO"}
    assert [text for _, text in results] == [want[s] for s, _ in results]


def test_clients_that_connect_at_once_are_queued_not_dropped():
    """HTTP/1.0 connects once per request, so the clients of one merged batch reconnect
    together: every connect completes (is queued) while the server is not yet accepting,
    where a SYN the kernel drops would wait a second to be sent again."""
    no_model = types.SimpleNamespace(manager=None)  # only paths outside /v1/ are asked
    rest_server = rest_module.RestServer(rest_module.RestApi(no_model), "127.0.0.1", 0)
    clients = [socket.socket() for _ in range(32)]
    try:
        for client in clients:
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", rest_server.port))
        time.sleep(0.5)  # the handshakes of every SYN the kernel kept are done
        connected = [client.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                     and _is_writable(client) for client in clients]
        assert sum(connected) == len(clients)
        rest_server.start()  # the queued ones are then answered
        clients[0].setblocking(True)
        clients[0].settimeout(30)
        clients[0].sendall(b"GET /elsewhere HTTP/1.0\r\n\r\n")
        assert clients[0].recv(64).startswith(b"HTTP/1.1 404")
    finally:
        for client in clients:
            client.close()
        rest_server.close()


def _is_writable(sock: socket.socket) -> bool:
    return bool(select.select([], [sock], [], 0)[1])


def predict_on(connection: http.client.HTTPConnection, sentence: str,
               headers: dict | None = None) -> tuple[http.client.HTTPResponse, dict]:
    connection.request("POST", PREDICT, json.dumps({"instances": [sentence]}),
                       {"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    return response, json.loads(response.read())


def test_a_connection_carries_a_clients_next_requests(handle):
    """HTTP/1.1 keep-alive, as TF Serving's REST API: one connection, many requests."""
    host, port = handle.rest_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        answers, sockets = [], []
        for sentence in ["hola", "el gato  negro", "hola"]:
            response, answer = predict_on(connection, sentence)
            assert response.status == 200 and response.version == 11
            assert response.getheader("Connection") is None  # not "close"
            answers.append(answer)
            sockets.append(connection.sock)
        assert sockets[0] is not None and sockets.count(sockets[0]) == 3  # never reconnected
        assert answers[0] == answers[2] == {
            "predictions": [{"translations": "v2:hello", "scores": -4.0}]}
        assert answers[1] != answers[0]
        # The server's end of the idle connection sends without Nagle's delay: an answer's
        # second write (its body) would otherwise wait for the client's delayed ACK.
        ours = []
        for _ in range(100):  # until the handler, done answering, waits for the next request
            ours = [handler for handler in list(handle._rest._httpd._idle)
                    if handler.client_address == connection.sock.getsockname()]
            if ours:
                break
            time.sleep(0.05)
        assert len(ours) == 1
        assert ours[0].connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        # A client that asks for the connection to close gets it closed after the answer.
        response, _ = predict_on(connection, "hola", {"Connection": "close"})
        assert response.status == 200 and response.getheader("Connection") == "close"
        assert connection.sock is None  # http.client closed its end on the server's word
    finally:
        connection.close()


def test_stopping_closes_idle_connections_and_answers_the_one_in_flight(model_base):
    """server_close() waits for its handlers: a client idle on keep-alive must not hold the
    stop for the idle timeout, and a request in flight is answered, with `Connection: close`."""
    running = server.start_server(str(model_base), MODEL, port=0, poll_seconds=0,
                                  rest_api_port=0)
    host, port = running.rest_address.rsplit(":", 1)
    idle = http.client.HTTPConnection(host, int(port), timeout=30)
    busy = http.client.HTTPConnection(host, int(port), timeout=30)
    stopper = threading.Thread(target=running.stop, kwargs={"grace": 5})
    try:
        assert predict_on(idle, "hola")[0].status == 200  # then left open, idle
        answers = []
        in_flight = threading.Thread(target=lambda: answers.append(
            predict_on(busy, "hola __slow__")))  # busy-waits 1.5 s in the model
        in_flight.start()
        time.sleep(0.5)
        stopper.start()
        in_flight.join(30)
        stopper.join(30)
        assert not stopper.is_alive(), "the stop waited on an idle keep-alive connection"
        (response, answer), = answers
        assert response.status == 200 and response.getheader("Connection") == "close"
        assert answer == {"predictions": [{"translations": "v2:hello __SLOW__",
                                           "scores": -13.0}]}
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            predict_on(idle, "hola")  # its connection was closed by the server
    finally:
        idle.close()
        busy.close()
        running.stop(grace=1)
        stopper.join(30)


# --------------------------------------------------------------------------------------------
# Status and metadata


def test_model_status_as_tf_serving_writes_it(handle):
    available = {"model_version_status": [{"version": "2", "state": "AVAILABLE",
                                           "status": {"error_code": "OK", "error_message": ""}}]}
    assert rest(handle, f"/v1/models/{MODEL}") == (200, available)
    assert rest(handle, f"/v1/models/{MODEL}/versions/2") == (200, available)
    assert rest(handle, f"/v1/models/{MODEL}/versions/1") == (
        404, {"error": "Could not find version 1 of model tfformer"})
    assert rest(handle, "/v1/models/nope") == (
        404, {"error": "Could not find any versions of model nope"})
    assert rest(handle, "/v1/models") == (400, {"error": "Missing model name in request."})


def test_metadata_is_grpc_get_model_metadata_as_json(handle, stub):
    status, answer = rest(handle, f"/v1/models/{MODEL}/metadata")
    assert status == 200
    assert answer["model_spec"] == {"name": MODEL, "version": "2", "signature_name": ""}
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = MODEL
    request.metadata_field.append("signature_def")
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    stub.GetModelMetadata(request, timeout=10).metadata["signature_def"].Unpack(signature_map)
    assert answer["metadata"] == {"signature_def": json_format.MessageToDict(
        signature_map, always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True)}
    signatures = answer["metadata"]["signature_def"]["signature_def"]
    # No __saved_model_init_op.
    assert set(signatures) == {"serving_default", "translate", NBEST}
    assert {k: v["dtype"] for k, v in signatures[NBEST]["inputs"].items()} == {
        "inputs": "DT_STRING", "k": "DT_INT32"}
    default = signatures["serving_default"]
    assert default["inputs"]["inputs"]["dtype"] == "DT_STRING"
    assert {k: v["dtype"] for k, v in default["outputs"].items()} == {
        "translations": "DT_STRING", "scores": "DT_FLOAT"}
    assert rest(handle, f"/v1/models/{MODEL}/versions/2/metadata")[1] == answer
    assert rest(handle, "/v1/models/nope/metadata") == (
        404, {"error": "Servable not found for request: Latest(nope)"})


# --------------------------------------------------------------------------------------------
# Bad requests: the same error as gRPC where the request reaches the shared validation


SAME_AS_GRPC = {
    # case: (REST body, the equivalent gRPC request)
    "empty batch": ({"inputs": []}, lambda: predict_request([], shape=[0])),
    "100,000 characters": ({"instances": ["hola", "a" * 100_000]},
                           lambda: predict_request(["hola", "a" * 100_000])),
    "invalid UTF-8": ({"instances": ["hola", "mundo", {"b64": base64.b64encode(
        b"caf\xe9").decode()}]}, lambda: predict_request([b"hola", b"mundo", b"caf\xe9"])),
    "batch over the limit": ({"instances": ["hola"] * (server.DEFAULT_MAX_BATCH_SIZE + 1)},
                             lambda: predict_request(["hola"] * 65)),
    "scalar (rank 0)": ({"inputs": "hola mundo"}, lambda: predict_request("hola mundo")),
    "rank 2": ({"instances": [["hola"]]}, lambda: predict_request([["hola"]])),
    "k = 0": ({"signature_name": NBEST, "inputs": {"inputs": ["hola"], "k": [0]}},
              lambda: nbest_request(["hola"], 0)),
    "k over the beam size": (
        {"signature_name": NBEST, "inputs": {"inputs": ["a", "b"], "k": [4, 4]}},
        lambda: nbest_request(["a", "b"], 4)),
    "k as a scalar": ({"signature_name": NBEST, "inputs": {"inputs": ["hola"], "k": 2}},
                      lambda: nbest_request(["hola"], 2, shape=[])),
}


@pytest.mark.parametrize("case", sorted(SAME_AS_GRPC))
def test_bad_requests_get_the_grpc_error_and_the_server_keeps_serving(handle, stub, case):
    body, grpc_request = SAME_AS_GRPC[case]
    error = rpc_error(stub.Predict, grpc_request())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rest(handle, PREDICT, body) == (400, {"error": error.details()})
    assert_still_serving(handle)


def test_unknown_model_and_version_get_the_grpc_error(handle, stub):
    for path, version, model in (("/v1/models/nope:predict", None, "nope"),
                                 (f"/v1/models/{MODEL}/versions/7:predict", 7, MODEL)):
        error = rpc_error(stub.Predict, predict_request(["hola"], model=model, version=version))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert rest(handle, path, {"instances": ["hola"]}) == (404, {"error": error.details()})
    assert_still_serving(handle)


def nested(value, depth: int):
    """`value` inside `depth` lists."""
    for _ in range(depth):
        value = [value]
    return value


# TF Serving's REST API reads the JSON against the signature before the Predict call: these
# errors are its own (json_tensor.cc, http_rest_api_handler.cc), not gRPC's.
REST_ERRORS = {
    "malformed JSON": (PREDICT, b'{"instances": ["hola"', "POST", 400, "JSON Parse error: "),
    "empty body": (PREDICT, b"", "POST", 400, "JSON Parse error: The document is empty"),
    "not an object": (PREDICT, ["hola"], "POST", 400, 'JSON Value: ["hola"] Is not object'),
    "no inputs": (PREDICT, {"signature_name": "translate"}, "POST", 400,
                  "Missing 'inputs' or 'instances' key"),
    "both formats": (PREDICT, {"inputs": ["a"], "instances": ["a"]}, "POST", 400,
                     "expecting only one of 'inputs' or 'instances' keys to exist"),
    "empty instances": (PREDICT, {"instances": []}, "POST", 400,
                        "No values in 'instances' array"),
    "wrong dtype": (PREDICT, {"instances": [1.5]}, "POST", 400,
                    "JSON Value: 1.5 Type: Number is not of expected type: string"),
    "signature_name not a string": (PREDICT, {"signature_name": 3, "inputs": ["a"]}, "POST",
                                    400, "'signature_name' key must be a string value."),
    "unknown signature": (PREDICT, {"signature_name": "nope", "inputs": ["a"]}, "POST", 400,
                          'Serving signature name: "nope" not found in signature def'),
    "unknown input name (row)": (PREDICT, {"instances": [{"text": "hola"}]}, "POST", 400,
                                 "JSON object: does not have named input: text"),
    "unknown input name (columnar)": (PREDICT, {"inputs": {"text": ["hola"]}}, "POST", 400,
                                      "Missing named input: inputs in 'inputs' object."),
    "mixed instances": (PREDICT, {"instances": ["hola", {"inputs": "x"}]}, "POST", 400,
                        "Expecting value/list but got object at item 1 of input list"),
    "ragged instances": (PREDICT, {"instances": [["a"], ["b", "c"]]}, "POST", 400,
                         "Expecting tensor size: 1 but got: 2"),
    "bad base64": (PREDICT, {"instances": [{"b64": "!!"}]}, "POST", 400,
                   "Unable to base64 decode"),
    "k as a float": (PREDICT, {"signature_name": NBEST, "inputs": {"inputs": ["a"], "k": [2.5]}},
                     "POST", 400, "JSON Value: 2.5 Type: Number is not of expected type: int32"),
    "k as a string": (PREDICT, {"signature_name": NBEST, "inputs": {"inputs": ["a"], "k": ["2"]}},
                      "POST", 400,
                      'JSON Value: "2" Type: String is not of expected type: int32'),
    "k over int32": (PREDICT, {"signature_name": NBEST,
                               "inputs": {"inputs": ["a"], "k": [2**40]}}, "POST", 400,
                     "JSON Value: 1099511627776 is out of range for int32"),
    "k missing": (PREDICT, {"signature_name": NBEST, "inputs": {"inputs": ["a"]}}, "POST", 400,
                  "Missing named input: k in 'inputs' object."),
    "n-best inputs not named": (PREDICT, {"signature_name": NBEST, "inputs": ["a"]}, "POST", 400,
                                "inputs is a plain value/list, but expecting an object"),
    "GET on predict": (PREDICT, None, "GET", 400, f"Malformed request: GET {PREDICT}"),
    "POST on status": (f"/v1/models/{MODEL}", {}, "POST", 400,
                       f"Malformed request: POST /v1/models/{MODEL}"),
    "DELETE": (f"/v1/models/{MODEL}", None, "DELETE", 400, "Malformed request: DELETE"),
    "classify": (f"/v1/models/{MODEL}:classify", {"examples": []}, "POST", 501,
                 "Classify is not implemented by the tfformer model server; use Predict"),
    "outside /v1/": ("/healthz", None, "GET", 404, "Not found: /healthz"),
    # Hostile bodies: Python's JSON parser gives up on this nesting with a RecursionError.
    "JSON nested 100,000 levels": (PREDICT, b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000
                                   + b"}", "POST", 400,
                                   "JSON Parse error: the document is nested too deeply"),
    "a value nested 300 levels": (PREDICT, {"instances": nested(["hola"], 300)}, "POST", 400,
                                  "JSON Value nested 300 levels deep: a tensor has at most 254 "
                                  "dimensions"),
    "100,000 instances": (PREDICT, {"instances": ["hola"] * 100_000}, "POST", 400,
                          "batch size 100000 exceeds the maximum of 64"),
    "a model name climbing out": ("/v1/models/..%2F..%2Fetc:predict", {"instances": ["a"]},
                                  "POST", 404, "Servable not found for request"),
    "a version that is a path": (f"/v1/models/{MODEL}/versions/../1:predict",
                                 {"instances": ["a"]}, "POST", 400, "Malformed request"),
}


@pytest.mark.parametrize("case", sorted(REST_ERRORS))
def test_rest_errors_have_tf_serving_status_and_the_server_keeps_serving(handle, case):
    path, body, method, status, message = REST_ERRORS[case]
    got_status, answer = rest(handle, path, body, method)
    assert got_status == status and set(answer) == {"error"}
    assert message in answer["error"]
    assert_still_serving(handle)


def raw_exchange(handle, data: bytes, *, send_all: bool = True) -> bytes:
    """Sends `data` on a plain TCP connection to the REST port and reads until the server closes
    it (HTTP/1.0); fails on a connection reset."""
    host, port = handle.rest_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(data)
        if send_all:
            connection.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    return received


def status_and_answer(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def test_a_body_over_the_limit_is_read_then_answered_413(handle):
    """curl, requests and urllib send the whole body before reading the answer: the server reads
    and drops it, so they see the 413 rather than a reset connection."""
    size = rest_module.MAX_BODY_BYTES + 1
    status, answer = rest(handle, PREDICT, b"x" * size)
    assert status == 413
    assert answer == {"error": f"request body of {size} bytes exceeds the maximum of "
                               f"{rest_module.MAX_BODY_BYTES}"}
    assert_still_serving(handle)


def test_expect_100_continue_refuses_a_body_over_the_limit_before_it_is_sent(handle):
    """curl sends `Expect: 100-continue` before a large body: an acceptable request gets `100
    Continue` and then its answer; one over the limit its 413 at once, and no body is read."""
    host, port = handle.rest_address.rsplit(":", 1)
    body = json.dumps({"instances": ["hola"]}).encode()
    head = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            f"Content-Length: {{length}}\r\n\r\n")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(head.format(length=len(body)).encode())
        assert connection.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        connection.sendall(body)
        response = http.client.HTTPResponse(connection)  # reads the answer from the socket
        response.begin()
        assert response.status == 200 and json.loads(response.read()) == {
            "predictions": [{"translations": "v2:hello", "scores": -4.0}]}
        response.close()
    size = rest_module.MAX_BODY_BYTES + 1
    status, answer = status_and_answer(raw_exchange(handle, head.format(length=size).encode(),
                                                    send_all=False))
    assert status == 413 and answer == {
        "error": f"request body of {size} bytes exceeds the maximum of "
                 f"{rest_module.MAX_BODY_BYTES}"}
    assert_still_serving(handle)


def test_a_chunked_body_is_answered_411_and_the_connection_closed(handle):
    """The body is dropped before the close (unread, it would reset the connection and the
    client would not see its 411): 1 MB here, far more than the server's read buffer."""
    body = json.dumps({"instances": ["hola " * 200_000]}).encode()
    request = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               f"{len(body):x}\r\n").encode() + body + b"\r\n0\r\n\r\n"
    response = raw_exchange(handle, request, send_all=False)  # read until the server closes
    status, answer = status_and_answer(response)
    assert status == 411 and "Content-Length" in answer["error"]
    assert b"\r\nConnection: close\r\n" in response
    assert_still_serving(handle)


def test_hostile_requests_get_an_answer_and_the_server_keeps_serving(handle):
    request = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {{length}}\r\n"
               f"Content-Type: {{type}}\r\n\r\n")
    # A Content-Length of 1 GB with 10 bytes behind it: answered once the client stops sending.
    lying = request.format(length=10**9, type="application/json").encode() + b"0123456789"
    started = time.monotonic()
    status, answer = status_and_answer(raw_exchange(handle, lying, send_all=False))
    assert status == 413 and "exceeds the maximum" in answer["error"]
    assert time.monotonic() - started < 20
    for length in ("-5", "12abc"):
        status, answer = status_and_answer(raw_exchange(
            handle, request.format(length=length, type="application/json").encode()))
        assert (status, answer) == (400, {"error": f"invalid Content-Length: {length}"})
    # TF Serving reads the body as JSON whatever its Content-Type.
    body = json.dumps({"instances": ["hola"]}).encode()
    status, answer = status_and_answer(raw_exchange(
        handle, request.format(length=len(body), type="text/plain").encode() + body))
    assert (status, answer) == (200, {"predictions": [{"translations": "v2:hello",
                                                       "scores": -4.0}]})
    # A TLS ClientHello on the plain port: the standard library's answer to a malformed request
    # line (a page saying "Bad request"), then the connection closes.
    hello = bytes.fromhex("160301007a0100007603030000000000000000000000000000000000000000000000"
                          "00000000000000000000000000000000") + b"\x00" * 64
    assert b"Bad request" in raw_exchange(handle, hello)
    assert_still_serving(handle)


def test_rest_port_in_use_fails_and_leaves_nothing_running(model_base):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="cannot bind the REST API"):
            server.start_server(str(model_base), MODEL, port=0, poll_seconds=0,
                                rest_api_port=taken.getsockname()[1])


def test_without_rest_api_port_there_is_no_rest_server(model_base):
    with server.start_server(str(model_base), MODEL, port=0, poll_seconds=0) as running:
        assert (running.rest_port, running.rest_address) == (None, None)


# --------------------------------------------------------------------------------------------
# The program


def test_program_serves_rest_and_finishes_an_in_flight_request_on_sigterm(model_base):
    port = free_port()
    with server_program("--model-base-path", str(model_base), "--log-level", "DEBUG",
                        "--rest-api-port", str(port)) as (process, output, grpc_port):
        address = output.wait_for(r"^tfformer-serve: REST API listening on (127\.0\.0\.1:\d+)$",
                                  20).group(1)
        assert address == f"127.0.0.1:{port}" and grpc_port != str(port)
        assert call(address, f"/v1/models/{MODEL}")[0] == 200
        answers = []
        in_flight = threading.Thread(target=lambda: answers.append(
            call(address, PREDICT, {"instances": ["hola __slow__"]})))
        in_flight.start()
        output.wait_for(r"Predict tfformer version 2", 20)  # the model call has started
        process.send_signal(signal.SIGTERM)
        in_flight.join(30)
        assert answers == [(200, {"predictions": [{"translations": "v2:hello __SLOW__",
                                                   "scores": -13.0}]})]
        assert process.wait(timeout=20) == 0
        output.wait_for(r"Server stopped", 5)
        with pytest.raises(urllib.error.URLError):
            call(address, f"/v1/models/{MODEL}")


def test_program_rest_api_port_0_is_off(model_base):
    with server_program("--model-base-path", str(model_base), "--rest-api-port", "0",
                        "--log-level", "DEBUG") as (process, output, _):
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        output.wait_for(r"Server stopped", 5)  # the last line: every line is seen now
        assert any("(gRPC)" in line for line in output.seen)
        assert not [line for line in output.seen if "REST" in line]


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_program_refuses_a_rest_api_port_out_of_range(port, caplog):
    assert serve_cli.main(["--model-base-path", "unused", "--rest-api-port", port]) == 2
    assert f"--rest-api-port must be a port number (0: off), got {port}" in caplog.text


@pytest.mark.parametrize("port", ["-1", "99999"])
def test_program_refuses_a_grpc_port_out_of_range(port, caplog):
    assert serve_cli.main(["--model-base-path", "unused", "--port", port]) == 2
    assert f"--port must be a port number (0: a free one), got {port}" in caplog.text

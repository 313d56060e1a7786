"""TF Serving's protos without TensorFlow's ``__init__`` (tfformer.serving.protos): what the gRPC
client (tfformer.serving.client, tfformer-translate) imports, and its tensors, which must be
what TensorFlow itself makes and reads.

The import tests each run in a fresh interpreter: this one has imported TensorFlow already.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tfformer.serving import client, protos

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(*parts: str) -> str:
    """Runs the (each indented) ``parts`` as one program in a fresh interpreter: its stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    code = "".join(map(textwrap.dedent, parts))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO_ROOT, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# Checks that the protos are TensorFlow's own, run once TensorFlow is imported (either order).
SAME_CLASSES = """
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2, types_pb2
    from tensorflow_serving.apis import predict_pb2

    assert isinstance(tf.__version__, str)
    assert tf.constant([1, 2]).numpy().tolist() == [1, 2]
    made = tf.make_tensor_proto(["hola"], dtype=tf.string, shape=[1])
    assert type(made) is protos.tensor_pb2.TensorProto is tensor_pb2.TensorProto
    assert predict_pb2 is client.predict_pb2 and types_pb2 is protos.types_pb2
    request = client.predict_pb2.PredictRequest()
    request.inputs["x"].CopyFrom(made)
    assert request.inputs["x"] == protos.string_tensor([b"hola"])
    # Submodules are attributes of their (real) packages, as after an ordinary import.
    assert sys.modules["tensorflow.core.framework"].tensor_pb2 is tensor_pb2
    assert tf.io.parse_tensor(made.SerializeToString(), tf.string).numpy().tolist() == [b"hola"]
    assert tf.make_ndarray(request.inputs["x"]).tolist() == [b"hola"]
"""


def test_the_client_imports_and_makes_requests_without_tensorflow_then_tensorflow_imports():
    run_python("""
        import sys
        from tfformer.serving import client, protos

        request = client.make_predict_request(["hola mundo"], k=2)
        assert client.parse_predict_response(client.predict_pb2.PredictResponse(outputs={
            "translations": protos.string_tensor([b"a", b"b"]),
            "scores": protos.tensor_pb2.TensorProto(
                dtype=protos.types_pb2.DT_FLOAT, float_val=[-1.0, -2.0],
                tensor_shape={"dim": [{"size": 1}, {"size": 2}]})}), 1, k=2) == [
            client.Translation("a", -1.0), client.Translation("b", -2.0)]
        assert "tensorflow" not in sys.modules and "tensorflow.python" not in sys.modules
        assert not any(name.startswith(("tensorflow.python", "keras")) for name in sys.modules)
    """, SAME_CLASSES)


def test_the_client_imports_after_tensorflow():
    run_python("""
        import sys
        import tensorflow
        from tfformer.serving import client, protos
        from tfformer.utils.imports import _IMPORT_HOOKS

        assert not any(name.startswith("tensorflow") for name in _IMPORT_HOOKS.hooks)
    """, SAME_CLASSES)


def test_tfformer_translate_over_grpc_does_not_import_tensorflow():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = run_python(f"""
        import contextlib, io, sys
        from tfformer.cli import translate

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = translate.main(["--server", "127.0.0.1:{port}", "--timeout", "2", "hola"])
        assert code == 1, (code, err.getvalue())
        assert "error: UNAVAILABLE from 127.0.0.1:{port}" in err.getvalue()
        print(sorted(name for name in sys.modules if name.split(".")[0] == "tensorflow"
                     and not name.endswith("_pb2")))
    """)
    assert out.strip() == "[]"


# --------------------------------------------------------------------------------------------
# Tensors, against TensorFlow's own conversion


@pytest.mark.parametrize("sentences", [["hola"], ["hola mundo", "", "ñandú 🦤", "x" * 1000], []])
def test_string_tensor_is_tf_make_tensor_proto(sentences):
    values = [s.encode("utf-8") for s in sentences]
    want = tf.make_tensor_proto(values, dtype=tf.string, shape=[len(values)])
    got = protos.string_tensor(values)
    assert got == want
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


@pytest.mark.parametrize("values, dtype", [
    ([1, 3, 2**31 - 1], "int32"), ([7], "int32"), ([], "int32"), ([0, 2**62], "int64"),
    ([0.5, 1.0, 1e-30], "float32")])
def test_vector_tensor_holds_what_tf_make_tensor_proto_holds(values, dtype):
    want = tf.make_tensor_proto(values, dtype=tf.as_dtype(dtype), shape=[len(values)])
    got = protos.vector_tensor(values, dtype)
    assert (got.dtype, got.tensor_shape) == (want.dtype, want.tensor_shape)
    np.testing.assert_array_equal(tf.make_ndarray(got), tf.make_ndarray(want))
    assert not got.tensor_content  # typed fields, as TF Serving writes them


@pytest.mark.parametrize("value, dtype", [(2**31, "int32"), (-2**31 - 1, "int32"),
                                          (2**63, "int64")])
def test_vector_tensor_refuses_values_out_of_range(value, dtype):
    # TensorFlow would wrap them around (2**31 -> -2**31): a different k than asked for.
    with pytest.raises(ValueError, match=f"out of the range of {dtype}"):
        protos.vector_tensor([1, value], dtype)


def test_make_predict_request_is_the_request_made_with_tensorflow():
    sentences = ["hola mundo", "ñandú"]
    request = client.make_predict_request(sentences, "m", "translate_nbest", 3, k=[2, 1])
    assert (request.model_spec.name, request.model_spec.signature_name,
            request.model_spec.version.value) == ("m", "translate_nbest", 3)
    assert request.inputs["inputs"] == tf.make_tensor_proto(
        [s.encode("utf-8") for s in sentences], dtype=tf.string, shape=[2])
    assert tf.make_ndarray(request.inputs["k"]).tolist() == [2, 1]
    assert request.inputs["k"].dtype == tf.int32.as_datatype_enum
    assert list(request.output_filter) == ["translations", "scores"]
    # one value for every sentence, and the other signatures' inputs by name and dtype
    request = client.make_predict_request(sentences, k=4, inputs={
        "temperature": 0.5, "top_k": [0, 3], "top_p": 0.9, "seed": [1, 2**40],
        "prefixes": ["The", ""]})
    arrays = {name: tf.make_ndarray(tensor) for name, tensor in request.inputs.items()}
    assert arrays["k"].tolist() == [4, 4] and arrays["k"].dtype == np.int32
    assert arrays["temperature"].tolist() == [0.5, 0.5]
    assert arrays["temperature"].dtype == np.float32
    assert arrays["top_k"].tolist() == [0, 3]
    assert arrays["seed"].tolist() == [1, 2**40] and arrays["seed"].dtype == np.int64
    assert arrays["prefixes"].tolist() == [b"The", b""]
    with pytest.raises(ValueError, match="top_k has 3 values for 2 sentences"):
        client.make_predict_request(sentences, inputs={"top_k": [1, 2, 3]})
    with pytest.raises(ValueError, match="unknown input 'beam'"):
        client.make_predict_request(sentences, inputs={"beam": 1})
    with pytest.raises(UnicodeEncodeError):
        client.make_predict_request(["\ud800"])


TENSORS = [
    np.array([b"hola", "ñandú".encode("utf-8"), b""], dtype=object),
    np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object),
    np.array(b"scalar", dtype=object),
    np.array([], dtype=object),
    np.array([-1.5, 0.25, 3.0], dtype=np.float32),  # several values: tensor_content
    np.array([-1.5], dtype=np.float32),  # one value: float_val
    np.array(7.0, dtype=np.float32),
    np.zeros([2, 0], dtype=np.float32),
    np.array([1e300, -2.5], dtype=np.float64),
    np.array([0.5], dtype=np.float16),
    np.array([[1, -2], [3, 4]], dtype=np.int32),
    np.array([5], dtype=np.int32),
    np.array([2**40], dtype=np.int64),
    np.array([200], dtype=np.uint8),
    np.array([True], dtype=np.bool_),
]


@pytest.mark.parametrize("array", TENSORS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_make_ndarray_reads_what_tensorflow_writes(array):
    tensor = tf.make_tensor_proto(array)
    want = tf.make_ndarray(tensor)
    got = protos.make_ndarray(tensor)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("tensor", [
    # Fewer values than the shape holds: the last one repeats.
    {"dtype": "DT_FLOAT", "float_val": [1.0, 2.0], "tensor_shape": {"dim": [{"size": 4}]}},
    {"dtype": "DT_STRING", "string_val": [b"a"], "tensor_shape": {"dim": [{"size": 3}]}},
    {"dtype": "DT_STRING", "tensor_shape": {"dim": [{"size": 2}]}},
    {"dtype": "DT_INT32", "tensor_shape": {"dim": [{"size": 2}]}},
    {"dtype": "DT_HALF", "half_val": [15360], "tensor_shape": {"dim": [{"size": 1}]}},
    {"dtype": "DT_FLOAT", "float_val": [1.0], "tensor_shape": {"dim": [{"size": 2}]},
     "tensor_content": np.array([3, 4], np.float32).tobytes()},
], ids=["float-padded", "string-padded", "string-empty", "int-empty", "half", "content-first"])
def test_make_ndarray_reads_short_tensors_as_tensorflow_does(tensor):
    proto = protos.tensor_pb2.TensorProto(**tensor)
    want = tf.make_ndarray(proto)
    got = protos.make_ndarray(proto)
    assert (got.dtype, got.shape, got.tolist()) == (want.dtype, want.shape, want.tolist())


def test_make_ndarray_refuses_a_dtype_it_does_not_read():
    with pytest.raises(TypeError, match="Unsupported tensor type"):
        protos.make_ndarray(tf.make_tensor_proto(np.array([1j], np.complex64)))


def test_parse_predict_response_reads_tensorflow_made_outputs():
    response = client.predict_pb2.PredictResponse()
    response.outputs["translations"].CopyFrom(tf.make_tensor_proto([b"hello", b"cat"]))
    response.outputs["scores"].CopyFrom(tf.make_tensor_proto(np.array([-1.5, -4.0], np.float32)))
    assert client.parse_predict_response(response, 2) == [
        client.Translation("hello", -1.5), client.Translation("cat", -4.0)]
    with pytest.raises(client.TranslationError, match="has 2 values for 3 sentences"):
        client.parse_predict_response(response, 3)

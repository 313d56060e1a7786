"""Translate with a tfformer model served by TensorFlow Serving, over gRPC.

Stand-alone: it needs only `pip install grpcio tensorflow-serving-api`, not tfformer, and builds
the request from the protos without calling TensorFlow:

    python grpc_client_example.py --server 127.0.0.1:8500 "hola mundo" "buenos días"

The contract (see README.md): signature `serving_default`, input `inputs` (DT_STRING [batch]),
outputs `translations` (DT_STRING [batch]) and `scores` (DT_FLOAT [batch]).
"""

import argparse
import sys

import grpc
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def translate(sentences, server="127.0.0.1:8500", model="tfformer", timeout=30.0):
    """Returns [(translation, score)] in the order of `sentences`."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = "serving_default"
    request.inputs["inputs"].CopyFrom(tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(sentences))]),
        string_val=[s.encode("utf-8") for s in sentences]))
    with grpc.insecure_channel(server) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(request, timeout=timeout)
    texts = [t.decode("utf-8") for t in response.outputs["translations"].string_val]
    return list(zip(texts, response.outputs["scores"].float_val))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--server", default="127.0.0.1:8500")
    parser.add_argument("--model", default="tfformer")
    args = parser.parse_args()
    try:
        for text, score in translate(args.sentences, args.server, args.model):
            print(f"{score:.4f}\t{text}")
    except grpc.RpcError as error:
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

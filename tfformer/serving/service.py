"""The gRPC servicers: `tensorflow.serving.PredictionService` and `ModelService.GetModelStatus`
over one ModelVersionManager. They hold no model logic: they only call the SavedModel's
signatures. `PredictionServicer.predict`, `.model_metadata` and `model_status` answer with a
response proto or raise ServingError, for the gRPC methods and the REST API (`rest`) alike."""

from __future__ import annotations

import logging

import grpc
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from tfformer.contract import DEFAULT_SIGNATURE
from tfformer.serving.batching import Batcher
from tfformer.serving.requests import (
    RequestValidator,
    ServingError,
    servable_request,
    serving_error,
    to_tensor_proto,
)
from tfformer.serving.versions import LoadedVersion, ModelVersionManager

logger = logging.getLogger(__name__)

SIGNATURE_DEF_FIELD = "signature_def"


def unimplemented(method: str) -> ServingError:
    return ServingError(grpc.StatusCode.UNIMPLEMENTED,
                        f"{method} is not implemented by the tfformer model server; use Predict")


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    """``tensorflow.serving.PredictionService`` over a ModelVersionManager; with a `Batcher`,
    Predict calls are merged as TF Serving's request batching merges them."""

    def __init__(self, manager: ModelVersionManager, validator: RequestValidator,
                 batcher: Batcher | None = None):
        self.manager = manager
        self.validator = validator
        self.batcher = batcher

    # -- RPCs

    def Predict(self, request, context):
        return self._call(self.predict, request, context)

    def GetModelMetadata(self, request, context):
        return self._call(self.model_metadata, request, context)

    def Classify(self, request, context):
        error = unimplemented("Classify")
        context.abort(error.code, error.details)

    def Regress(self, request, context):
        error = unimplemented("Regress")
        context.abort(error.code, error.details)

    def MultiInference(self, request, context):
        error = unimplemented("MultiInference")
        context.abort(error.code, error.details)

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
                               f"Servable not found for request: {servable_request(spec)}")
        return loaded

    def predict(self, request):
        """The PredictResponse to a PredictRequest (raises ServingError)."""
        if not request.HasField("model_spec"):
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
        loaded = self.resolve(request.model_spec)
        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        function = loaded.signatures.get(signature_name)
        if function is None:
            # TF Serving's wording and code (predict_util.cc): FAILED_PRECONDITION.
            raise ServingError(grpc.StatusCode.FAILED_PRECONDITION,
                               f'Serving signature key "{signature_name}" not found.')
        feeds = self.validator.inputs(function, request)
        output_names = self.validator.output_filter(function, request)
        logger.debug("Predict %s version %d signature %s batch %s", self.manager.name,
                     loaded.version, signature_name,
                     {k: tuple(v.shape) for k, v in feeds.items()})
        try:
            if self.batcher is None:
                outputs = {name: tensor.numpy() for name, tensor in function(**feeds).items()}
            else:  # merged with other requests of this signature and version
                outputs = self.batcher.run((id(loaded), signature_name), function, feeds)
        except tf.errors.OpError as error:
            raise serving_error(error) from error
        response = predict_pb2.PredictResponse()
        response.model_spec.name = self.manager.name
        response.model_spec.signature_name = signature_name
        response.model_spec.version.value = loaded.version
        for name in output_names:
            response.outputs[name].CopyFrom(to_tensor_proto(outputs[name]))
        return response

    def model_metadata(self, request):
        """The GetModelMetadataResponse to a request (raises ServingError)."""
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
        try:
            return model_status(self.manager, request.model_spec)
        except ServingError as error:
            context.abort(error.code, error.details)


def model_status(manager: ModelVersionManager,
                 spec) -> get_model_status_pb2.GetModelStatusResponse:
    """TF Serving's GetModelStatus answer for a ModelSpec (raises ServingError: NOT_FOUND)."""
    loaded = manager.current
    if spec.name != manager.name or loaded is None:
        raise ServingError(grpc.StatusCode.NOT_FOUND,
                           f"Could not find any versions of model {spec.name}")
    if spec.HasField("version") and spec.version.value != loaded.version:
        raise ServingError(grpc.StatusCode.NOT_FOUND,
                           f"Could not find version {spec.version.value} of model {spec.name}")
    response = get_model_status_pb2.GetModelStatusResponse()
    status = response.model_version_status.add(
        version=loaded.version, state=get_model_status_pb2.ModelVersionStatus.AVAILABLE)
    status.status.SetInParent()  # error_code OK, error_message "", as TF Serving fills it
    return response

"""A local stand-in for TensorFlow Serving's gRPC API (and its REST API), for development and
tests.

It serves one model from a TF Serving model base path (``BASE/NAME/VERSION/saved_model.pb``)
through the official ``tensorflow.serving.PredictionService`` (and ``ModelService.GetModelStatus``)
protos, so a client written against it works unchanged against ``tensorflow_model_server``:
`versions` finds, loads and hot-swaps versions, `requests` validates requests, `service` answers
the RPCs, `rest` answers the same over HTTP/JSON; this module starts and stops the gRPC server
and the REST one (the program is `tfformer-serve`).
``Classify``, ``Regress`` and ``MultiInference`` answer UNIMPLEMENTED.
"""

from __future__ import annotations

import logging
import os
from concurrent import futures
from typing import Optional

import grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from tfformer.contract import list_versions
from tfformer.serving.batching import Batcher, BatchingParameters
from tfformer.serving.defaults import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_HOST,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_INPUT_CHARS,
    DEFAULT_POLL_SECONDS,
    DEFAULT_WORKERS,
)
from tfformer.serving.requests import RequestValidator
from tfformer.serving.rest import RestApi, RestServer
from tfformer.serving.service import ModelStatusServicer, PredictionServicer
from tfformer.serving.versions import ModelVersionManager, import_tensorflow_text

logger = logging.getLogger(__name__)



def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ServerHandle:
    """A running server: ``port`` (the bound one), ``address``, ``manager``, ``stop()``;
    ``rest_port`` and ``rest_address`` (None without the REST API)."""

    def __init__(self, server: grpc.Server, manager: ModelVersionManager, host: str, port: int,
                 rest: Optional[RestServer] = None, batcher: Optional[Batcher] = None):
        self._server = server
        self._rest = rest
        self.batcher = batcher
        self.manager = manager
        self.host = host
        self.port = port
        self.address = _address(host, port)
        self.rest_port = rest.port if rest else None
        self.rest_address = rest.address if rest else None
        self._stopped = False

    def stop(self, grace: Optional[float] = DEFAULT_GRACE_SECONDS) -> None:
        """Stop accepting RPCs, let in-flight ones finish for up to ``grace`` seconds, then stop
        (in-flight REST requests are finished whatever the grace)."""
        if self._stopped:
            return
        self._stopped = True
        stopped = self._server.stop(grace)  # rejects new RPCs now
        if self._rest:
            self._rest.shutdown()  # accepts no new REST requests
        self.manager.stop_polling(timeout=1.0)  # do not wait out a long model load
        stopped.wait()
        if self._rest:
            self._rest.close()
        if self.batcher:
            self.batcher.stop()

    def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        return self._server.wait_for_termination(timeout)

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop(grace=1.0)


def start_server(
    model_base_path: str,
    model_name: Optional[str] = None,
    host: str = DEFAULT_HOST,
    port: int = 0,
    *,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    workers: int = DEFAULT_WORKERS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
    rest_api_port: Optional[int] = None,
    batching: Optional[BatchingParameters] = None,
) -> ServerHandle:
    """Load the highest version under ``model_base_path`` (the ``BASE/NAME`` dir) and serve it.

    ``model_name`` defaults to the base path's last component. ``port=0`` binds a free port (read
    it from the handle). ``rest_api_port`` also serves TF Serving's REST API on ``host`` (0: a
    free port; None: no REST API). ``batching`` merges concurrent requests as TF Serving's
    ``--enable_batching`` does (`tfformer.serving.batching`). ``poll_seconds <= 0`` disables
    polling. Raises
    ``FileNotFoundError`` when no version directory exists, ``RuntimeError`` when the highest
    version fails to load (like TF Serving, which does not start then), ``OSError`` when an
    address cannot be bound.
    """
    base_path = os.path.abspath(model_base_path)
    name = model_name or os.path.basename(base_path.rstrip(os.sep))
    import_tensorflow_text()
    manager = ModelVersionManager(name, base_path, poll_seconds)
    if not list_versions(base_path):
        raise FileNotFoundError(f"no version directory (e.g. {os.path.join(base_path, '1')}) "
                                f"with a saved_model.pb under {base_path}")
    manager.poll_once()
    if manager.current is None:
        raise RuntimeError(f"the highest version under {base_path} failed to load (see the log)")

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tfformer-serve"),
        # Without this gRPC sets SO_REUSEPORT and a second server on a busy port "binds" silently.
        options=[("grpc.so_reuseport", 0)],
    )
    batcher = Batcher(batching) if batching is not None else None
    servicer = PredictionServicer(manager, RequestValidator(max_batch_size, max_input_chars),
                                  batcher)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(servicer, server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelStatusServicer(manager), server)
    try:
        try:
            bound = server.add_insecure_port(_address(host, port))
        except RuntimeError as error:
            raise OSError(f"cannot bind {_address(host, port)}: {error}") from error
        if not bound:
            raise OSError(f"cannot bind {_address(host, port)}")
        try:
            rest = (None if rest_api_port is None
                    else RestServer(RestApi(servicer), host, rest_api_port))
        except OSError:
            server.stop(None)
            raise
    except OSError:
        if batcher:
            batcher.stop()
        raise
    server.start()
    if rest:
        rest.start()
    manager.start_polling()
    handle = ServerHandle(server, manager, host, bound, rest, batcher)
    logger.info("Serving model %r version %d from %s at %s (gRPC)%s", name,
                manager.current.version, base_path, handle.address,
                f" and {handle.rest_address} (REST)" if rest else "")
    return handle

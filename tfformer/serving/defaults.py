"""The serving side's defaults, in a module without TensorFlow or gRPC: `tfformer-serve --help`
and `tfformer-translate --help` show them without loading either."""

from __future__ import annotations

from tfformer.contract import DEFAULT_MODEL_NAME

# The server (tfformer-serve, tfformer.serving.server).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8500  # TF Serving's gRPC port
DEFAULT_REST_API_PORT = 0  # off, as TF Serving's --rest_api_port (which is 8501 in its image)
DEFAULT_WORKERS = 8
DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_POLL_SECONDS = 1.0  # how often the model base path is scanned for new versions
# Requests it accepts (tfformer.serving.requests).
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_MAX_INPUT_CHARS = 1000

# The client (tfformer-translate, tfformer.serving.client).
DEFAULT_SERVER = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
DEFAULT_MODEL = DEFAULT_MODEL_NAME
DEFAULT_TIMEOUT = 10.0
DEFAULT_BATCH_SIZE = 32  # at most the server's DEFAULT_MAX_BATCH_SIZE

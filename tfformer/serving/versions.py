"""Finding, loading and hot-swapping the versions of one model (TF Serving's source + manager).

The highest version under the model base path (see `tfformer.contract` for what counts as one)
is loaded completely, and its warmup requests replayed, before it replaces the one serving; a
version that fails to load is logged and the old one keeps serving; polling retries a failed
version only once its files change.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Mapping, Optional

import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2

from tfformer.contract import DEFAULT_SIGNATURE, list_versions, read_saved_model
from tfformer.export.warmup import read_warmup_requests
from tfformer.serving.defaults import DEFAULT_POLL_SECONDS
from tfformer.serving.requests import RequestValidator, ServingError

logger = logging.getLogger(__name__)

INIT_OP_SIGNATURE = "__saved_model_init_op"


def read_signature_defs(saved_model_dir: str) -> dict[str, meta_graph_pb2.SignatureDef]:
    """The SignatureDefs of the ``serve`` MetaGraph in ``saved_model.pb`` (or ``.pbtxt``)."""
    saved_model = read_saved_model(saved_model_dir)
    if not saved_model.meta_graphs:
        raise ValueError(f"{saved_model_dir}: the SavedModel has no MetaGraph")
    meta_graph = next(
        (m for m in saved_model.meta_graphs if "serve" in m.meta_info_def.tags),
        saved_model.meta_graphs[0],
    )
    return {
        key: value
        for key, value in meta_graph.signature_def.items()
        if key != INIT_OP_SIGNATURE
    }


def import_tensorflow_text() -> None:
    """Register the tf-text ops (SentencePiece...) the tfformer SavedModel needs before loading."""
    try:
        import tensorflow_text  # noqa: F401  (imported for its op registrations)
    except ImportError as error:  # the stand-in models of the tests do not need it
        logger.warning("tensorflow_text is not importable (%s); models using its ops will fail "
                       "to load", error)


@dataclasses.dataclass(frozen=True)
class LoadedVersion:
    """One loaded version of the model: what a request needs, captured at once."""

    version: int
    path: str
    signatures: Mapping[str, Any]  # signature key -> ConcreteFunction
    signature_defs: Mapping[str, meta_graph_pb2.SignatureDef]  # without __saved_model_init_op
    saved_model: Any = dataclasses.field(repr=False)  # keeps the loaded object alive
    warmup_requests: int = 0  # replayed before the version served


def load_version(path: str, version: int) -> LoadedVersion:
    """Load one version directory completely and replay its warmup requests (raises on any
    failure, a failed warmup request included, as TF Serving does)."""
    signature_defs = read_signature_defs(path)
    loaded = tf.saved_model.load(path)
    signatures = dict(loaded.signatures)
    if not signatures:
        raise ValueError(f"{path}: the SavedModel has no serving signatures")
    warmed = warm_up(path, signatures)
    return LoadedVersion(version, path, signatures, signature_defs, loaded, warmed)


def warm_up(path: str, signatures: Mapping[str, Any]) -> int:
    """Runs each request of the version's warmup file (`tfformer.export.warmup`) on its
    signature, its inputs checked and converted as a Predict request's are; returns how many
    ran.

    Raises:
        ValueError: a request for a signature the SavedModel lacks, or one that fails.
    """
    requests = read_warmup_requests(path)
    validator = RequestValidator()
    for number, request in enumerate(requests, start=1):
        name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        if name not in signatures:
            raise ValueError(f"warmup request {number} names signature {name!r}, which the "
                             f"SavedModel lacks (it has {', '.join(sorted(signatures))})")
        try:
            signatures[name](**validator.inputs(signatures[name], request))
        except ServingError as error:
            raise ValueError(f"warmup request {number} ({name}) failed: {error.details}") from None
        except tf.errors.OpError as error:
            raise ValueError(f"warmup request {number} ({name}) failed: {error.message}") from None
    return len(requests)


def _fingerprint(path: str) -> tuple:
    """Cheap identity of a version directory's content, to retry a failed load once it changes."""
    entries = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            entries.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(entries))


class ModelVersionManager:
    """Keeps the highest version of one model loaded, polling its base path for new versions.

    ``current`` is swapped by a single reference assignment, so a request that read it keeps a
    consistent version to the end while the next request sees the new one.
    """

    def __init__(self, name: str, base_path: str, poll_seconds: float = DEFAULT_POLL_SECONDS):
        self.name = name
        self.base_path = os.path.abspath(base_path)
        self.poll_seconds = poll_seconds
        self._current: Optional[LoadedVersion] = None
        self._failed: dict[int, tuple] = {}
        self._warned_empty = False
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def current(self) -> Optional[LoadedVersion]:
        return self._current

    def poll_once(self) -> bool:
        """Load the highest version unless it is serving already; True when one was swapped in."""
        with self._poll_lock:
            versions = list_versions(self.base_path)
            current = self._current
            if not versions:
                if not self._warned_empty:
                    logger.warning("No versions of servable %s found under base path %s%s",
                                   self.name, self.base_path,
                                   f"; still serving version {current.version}" if current else "")
                    self._warned_empty = True
                return False
            self._warned_empty = False
            target = max(versions)
            if current is not None and current.version == target:
                return False
            path = versions[target]
            fingerprint = _fingerprint(path)
            if self._failed.get(target) == fingerprint:
                return False  # already failed with this content; retried once it changes
            logger.info("Loading servable %s version %d from %s", self.name, target, path)
            try:
                loaded = load_version(path, target)
            except Exception as error:  # noqa: BLE001 - any failure must leave the old version up
                self._failed[target] = fingerprint
                logger.error("Failed to load servable %s version %d from %s: %s: %s%s",
                             self.name, target, path, type(error).__name__, error,
                             f"; still serving version {current.version}" if current else "")
                return False
            self._failed.pop(target, None)
            self._current = loaded
            logger.info("Serving servable %s version %d%s%s", self.name, target,
                        f" after {loaded.warmup_requests} warmup request(s)"
                        if loaded.warmup_requests else "",
                        f" (replacing version {current.version})" if current else "")
            return True

    def start_polling(self) -> None:
        if self._thread is not None or self.poll_seconds <= 0:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll_loop, name="tfformer-serve-poll",
                                        daemon=True)
        self._thread.start()

    def stop_polling(self, timeout: Optional[float] = None) -> None:
        """Stop the poller, waiting up to ``timeout`` for a load in progress (a daemon thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the poller must survive e.g. a vanished directory
                logger.exception("Polling %s failed", self.base_path)

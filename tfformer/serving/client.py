"""Translate with the exported tfformer model: over TF Serving's gRPC API, or in process.

``translate()`` speaks the official ``tensorflow.serving.PredictionService`` protocol, so it works
unchanged against ``tensorflow_model_server`` and against ``tfformer.serving.server`` (the local
stand-in), and without importing TensorFlow (see `tfformer.serving.protos`): a client process
starts in a fraction of a second.
``translate_saved_model()`` calls the SavedModel's signature in this process instead.
``translate_nbest()`` and ``translate_saved_model_nbest()`` return the k best hypotheses of each
sentence (the ``translate_nbest`` signature); ``translate_sample()`` samples a translation
(``translate_sample``), ``translate_prefix()`` continues a given start of the translation
(``translate_prefix``), ``translate_align()`` adds each translation's word alignment
(``translate_align``). Their parameters take one value for every sentence or a list of one per
sentence: each is an input [batch] of the signature.

The ``tfformer-translate`` command (`tfformer.cli.translate`) wraps both.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
from typing import Any, Iterable, Optional, Sequence

import grpc

from tfformer.contract import (
    ALIGN_SIGNATURE,
    DEFAULT_SIGNATURE,
    INPUT_DTYPES,
    INPUT_NAME,
    NBEST_K_NAME,
    NBEST_SIGNATURE,
    OUTPUT_ALIGNMENTS,
    OUTPUT_SCORES,
    OUTPUT_TRANSLATIONS,
    PREFIX_SIGNATURE,
    PREFIXES_NAME,
    SAMPLE_SIGNATURE,
    SEED_NAME,
    TEMPERATURE_NAME,
    TOP_K_NAME,
    TOP_P_NAME,
    saved_model_dir,
)
from tfformer.decode.batch_translate import translate_in_batches
from tfformer.serving.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MODEL,
    DEFAULT_SERVER,
    DEFAULT_TIMEOUT,
)
from tfformer.serving.protos import (
    make_ndarray,
    predict_pb2,
    prediction_service_pb2_grpc,
    string_tensor,
    vector_tensor,
)
from tfformer.utils.checks import check_at_least

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Translation:
    """A translation, its score and, from ``translate_align``, its word alignment: "i-j" pairs
    of source and target SentencePiece pieces (``tfformer.contract``)."""

    text: str
    score: float
    alignment: Optional[str] = None


class TranslationError(RuntimeError):
    """A failed translation request: ``code`` is the gRPC status code (None for a response that
    does not fit the model's contract), ``details`` the server's message."""

    def __init__(self, code: Optional[grpc.StatusCode], details: str, server: Optional[str] = None):
        where = f" from {server}" if server else ""
        super().__init__(f"{code.name if code else 'BAD_RESPONSE'}{where}: {details}")
        self.code = code
        self.details = details
        self.server = server


def _check_sentences(sentences: Sequence[str]) -> list[str]:
    if isinstance(sentences, (str, bytes)):
        raise TypeError("sentences must be a sequence of str, not a single string")
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{index}] is {type(sentence).__name__}, not str")
    return sentences


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _decode(texts: Iterable[Any], scores: Iterable[Any],
            alignments: Optional[Iterable[Any]] = None) -> list[Translation]:
    if alignments is None:
        return [Translation(_text(t), float(s)) for t, s in zip(texts, scores, strict=True)]
    return [Translation(_text(t), float(s), _text(a))
            for t, s, a in zip(texts, scores, alignments, strict=True)]


def per_sentence(name: str, value: Any, count: int) -> list:
    """``value`` for each of ``count`` sentences: a list of ``count`` values as it is, else
    ``count`` copies of the one value."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} values for {count} sentences")
        return list(value)
    return [value] * count


def make_predict_request(sentences: Sequence[str], model: str = DEFAULT_MODEL,
                         signature: str = DEFAULT_SIGNATURE,
                         version: Optional[int] = None, *,
                         k: Optional[int | Sequence[int]] = None,
                         inputs: Optional[dict[str, Any]] = None,
                         alignments: bool = False) -> predict_pb2.PredictRequest:
    """The PredictRequest TF Serving expects for a batch of sentences; with ``k``, also the
    n-best signature's ``k``; ``inputs``: the signature's other inputs by name
    (``tfformer.contract``). Each takes a value for every sentence or a list of one per
    sentence, and is sent as a vector [batch]. ``alignments``: ask for that output too."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[INPUT_NAME].CopyFrom(string_tensor([s.encode("utf-8") for s in sentences]))
    extra = dict(inputs or {})
    if k is not None:
        extra[NBEST_K_NAME] = k
    for name, value in extra.items():
        values = per_sentence(name, value, len(sentences))
        dtype = INPUT_DTYPES.get(name)
        if dtype is None:
            raise ValueError(f"unknown input {name!r}; inputs: {sorted(INPUT_DTYPES)}")
        request.inputs[name].CopyFrom(
            string_tensor([v.encode("utf-8") for v in values]) if dtype == "string"
            else vector_tensor(values, dtype))
    request.output_filter.extend([OUTPUT_TRANSLATIONS, OUTPUT_SCORES]
                                 + ([OUTPUT_ALIGNMENTS] if alignments else []))
    return request


def parse_predict_response(response: predict_pb2.PredictResponse, expected: int,
                           server: Optional[str] = None, *,
                           k: Optional[int] = None,
                           alignments: bool = False) -> list[Translation]:
    """The ``expected`` translations of a response; with ``k`` (an n-best response), the
    ``expected * k`` hypotheses, sentence by sentence, best first; with ``alignments``, each
    with its alignment."""
    count = expected * (k or 1)
    per = f" x {k} hypotheses" if k else ""
    arrays = {}
    for name in (OUTPUT_TRANSLATIONS, OUTPUT_SCORES) + ((OUTPUT_ALIGNMENTS,) if alignments else ()):
        if name not in response.outputs:
            raise TranslationError(None, f"response has no output {name!r} "
                                         f"(outputs: {sorted(response.outputs)})", server)
        arrays[name] = make_ndarray(response.outputs[name]).reshape(-1)
        if arrays[name].shape[0] != count:
            raise TranslationError(None, f"output {name!r} has {arrays[name].shape[0]} values "
                                         f"for {expected} sentences{per}", server)
    return _decode(arrays[OUTPUT_TRANSLATIONS], arrays[OUTPUT_SCORES],
                   arrays.get(OUTPUT_ALIGNMENTS))


def parse_nbest_response(response: predict_pb2.PredictResponse, ks: Sequence[int],
                         server: Optional[str] = None) -> list[list[Translation]]:
    """The hypotheses of an n-best response, ``ks[i]`` for sentence i, best first (the columns
    past its own k, there when another sentence asked for more, are dropped)."""
    expected = len(ks)
    tensor = response.outputs.get(OUTPUT_TRANSLATIONS)
    if tensor is None:
        parse_predict_response(response, expected, server)  # raises: no such output
    dims = [d.size for d in tensor.tensor_shape.dim]
    width = dims[1] if len(dims) == 2 and dims[0] == expected else -1
    if width < max(ks, default=1):
        raise TranslationError(None, f"output {OUTPUT_TRANSLATIONS!r} of shape {dims} does not "
                                     f"hold {max(ks)} hypotheses for each of {expected} "
                                     f"sentences", server)
    flat = parse_predict_response(response, expected, server, k=width)
    return [flat[i * width:i * width + k] for i, k in enumerate(ks)]


def _check_k(k: int) -> int:
    k = operator.index(k)  # TypeError for a float or None
    check_at_least("k", k)
    return k


def _check_ks(k: int | Sequence[int], count: int) -> list[int]:
    """One checked k for each of `count` sentences."""
    return [_check_k(value) for value in per_sentence(NBEST_K_NAME, k, count)]


def _batch_inputs(inputs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Per-sentence inputs, one dict per sentence, for batching with the sentences."""
    columns = {name: per_sentence(name, value, count) for name, value in inputs.items()}
    return [{name: values[i] for name, values in columns.items()} for i in range(count)]


def _predict_over_grpc(sentences: Sequence[str], server: str, timeout: float,
                       channel: Optional[grpc.Channel], batch_size: int, model: str,
                       signature: str, version: Optional[int],
                       inputs: Optional[dict[str, Any]] = None, nbest: bool = False,
                       alignments: bool = False) -> list:
    """One Predict call per batch of ``sentences`` (``make_predict_request`` with the batch's
    share of ``inputs``, per-sentence values by name): a Translation per sentence (with its
    alignment if ``alignments``), or with ``nbest`` a list of k (``inputs["k"]``)."""
    sentences = _check_sentences(sentences)
    if not sentences:
        return []
    rows = _batch_inputs(inputs or {}, len(sentences))
    own_channel = channel is None
    target = server if own_channel else None  # a given channel may point anywhere
    if own_channel:
        channel = grpc.insecure_channel(server)
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        def predict(indices: list[int]) -> list:
            batch = [sentences[i] for i in indices]
            request = make_predict_request(
                batch, model, signature, version,
                inputs={name: [rows[i][name] for i in indices] for name in inputs or {}},
                alignments=alignments)
            try:
                response = stub.Predict(request, timeout=timeout)
            except grpc.RpcError as error:
                raise TranslationError(error.code(), error.details() or "", target) from None
            if nbest:
                return parse_nbest_response(response, [rows[i][NBEST_K_NAME] for i in indices],
                                            target)
            return parse_predict_response(response, len(batch), target, alignments=alignments)

        return [translation for batch in translate_in_batches(
            predict, range(len(sentences)), batch_size) for translation in batch]
    finally:
        if own_channel:
            channel.close()


def translate(
    sentences: Sequence[str],
    server: str = DEFAULT_SERVER,
    model: str = DEFAULT_MODEL,
    signature: str = DEFAULT_SIGNATURE,
    timeout: float = DEFAULT_TIMEOUT,
    channel: Optional[grpc.Channel] = None,
    *,
    version: Optional[int] = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[Translation]:
    """Translate ``sentences`` with a TF Serving (or ``tfformer.serving.server``) model over gRPC.

    One Predict call per ``batch_size`` sentences, each with ``timeout`` seconds. ``channel`` is
    used (and left open) when given; otherwise a channel to ``server`` is opened and closed.
    ``version`` pins ``ModelSpec.version``. Raises ``TranslationError`` (with ``.code`` and
    ``.details``) on any gRPC error or a response that does not fit the model's contract.
    """
    return _predict_over_grpc(sentences, server, timeout, channel, batch_size, model,
                              signature, version)


def translate_nbest(sentences: Sequence[str], k: int | Sequence[int],
                    server: str = DEFAULT_SERVER, model: str = DEFAULT_MODEL,
                    signature: str = NBEST_SIGNATURE, timeout: float = DEFAULT_TIMEOUT,
                    channel: Optional[grpc.Channel] = None, *, version: Optional[int] = None,
                    batch_size: int = DEFAULT_BATCH_SIZE) -> list[list[Translation]]:
    """The ``k`` best translations of each sentence, best first, over gRPC (as ``translate``);
    ``k`` is one number for every sentence or a list of one per sentence.

    ``k`` above the export's beam size is refused by the model: ``TranslationError`` with
    ``INVALID_ARGUMENT``.
    """
    sentences = _check_sentences(sentences)
    return _predict_over_grpc(sentences, server, timeout, channel, batch_size, model,
                              signature, version,
                              inputs={NBEST_K_NAME: _check_ks(k, len(sentences))}, nbest=True)


def translate_sample(sentences: Sequence[str], temperature: float | Sequence[float] = 1.0,
                     top_k: int | Sequence[int] = 0, top_p: float | Sequence[float] = 1.0,
                     seed: int | Sequence[int] = 0, server: str = DEFAULT_SERVER,
                     model: str = DEFAULT_MODEL, signature: str = SAMPLE_SIGNATURE,
                     timeout: float = DEFAULT_TIMEOUT, channel: Optional[grpc.Channel] = None,
                     *, version: Optional[int] = None,
                     batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """A sampled translation of each sentence, over gRPC (as ``translate``): ``temperature``
    (> 0), ``top_k`` (0: off), ``top_p`` (in (0, 1]; 1: off) and ``seed`` (>= 0; the same seed
    and sentence give the same sample), each one value or one per sentence. The score is the
    model's log P of the sample. A value out of range: ``TranslationError`` INVALID_ARGUMENT."""
    return _predict_over_grpc(sentences, server, timeout, channel, batch_size, model,
                              signature, version,
                              inputs=_sample_inputs(temperature, top_k, top_p, seed))


def translate_prefix(sentences: Sequence[str], prefixes: str | Sequence[str],
                     server: str = DEFAULT_SERVER, model: str = DEFAULT_MODEL,
                     signature: str = PREFIX_SIGNATURE, timeout: float = DEFAULT_TIMEOUT,
                     channel: Optional[grpc.Channel] = None, *, version: Optional[int] = None,
                     batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """Translations that start with ``prefixes`` (target-side text, one for every sentence
    or one per sentence; "" for none), over gRPC (as ``translate``); the score is the
    continuation's."""
    return _predict_over_grpc(sentences, server, timeout, channel, batch_size, model,
                              signature, version, inputs=_prefix_inputs(prefixes))


def translate_align(sentences: Sequence[str], server: str = DEFAULT_SERVER,
                    model: str = DEFAULT_MODEL, signature: str = ALIGN_SIGNATURE,
                    timeout: float = DEFAULT_TIMEOUT, channel: Optional[grpc.Channel] = None, *,
                    version: Optional[int] = None,
                    batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate``'s translations, each with its ``alignment`` (Pharaoh "i-j" pairs of
    source and target pieces), over gRPC."""
    return _predict_over_grpc(sentences, server, timeout, channel, batch_size, model,
                              signature, version, alignments=True)


def _sample_inputs(temperature, top_k, top_p, seed) -> dict[str, Any]:
    return {TEMPERATURE_NAME: temperature, TOP_K_NAME: top_k, TOP_P_NAME: top_p,
            SEED_NAME: seed}


def _prefix_inputs(prefixes: str | Sequence[str]) -> dict[str, Any]:
    return {PREFIXES_NAME: prefixes if isinstance(prefixes, str) else list(prefixes)}


# --------------------------------------------------------------------------------------------
# In process


def load_saved_model(path: str) -> Any:
    """Load a SavedModel after registering the tf-text ops: ``path`` itself when it holds a
    saved_model.pb, else its highest integer version subdirectory (a TF Serving ``BASE/NAME``
    directory)."""
    found = saved_model_dir(path)
    if found is None:
        raise FileNotFoundError(f"{path}: neither a SavedModel directory nor a model base path "
                                f"with version subdirectories")
    import tensorflow as tf

    from tfformer.serving.versions import import_tensorflow_text

    import_tensorflow_text()
    return tf.saved_model.load(found)


def _signature(saved_model: Any, signature: str) -> Any:
    if isinstance(saved_model, (str, os.PathLike)):
        saved_model = load_saved_model(os.fspath(saved_model))
    if signature not in saved_model.signatures:
        raise KeyError(f"signature {signature!r} not in the SavedModel "
                       f"(has: {sorted(saved_model.signatures)})")
    return saved_model.signatures[signature]


def translate_saved_model(sentences: Sequence[str], saved_model: Any,
                          signature: str = DEFAULT_SIGNATURE,
                          batch_size: int = DEFAULT_BATCH_SIZE, *,
                          inputs: Optional[dict[str, Any]] = None,
                          alignments: bool = False) -> list[Translation]:
    """Translate in process with a loaded SavedModel (from ``load_saved_model``) or a path;
    ``inputs``: the signature's other inputs, as for ``make_predict_request`` (see
    ``translate_saved_model_sample`` and ``translate_saved_model_prefix``); ``alignments``:
    read that output too (``translate_saved_model_align``)."""
    import tensorflow as tf

    sentences = _check_sentences(sentences)
    function = _signature(saved_model, signature)
    rows = _batch_inputs(inputs or {}, len(sentences))

    def call(indices: list[int]) -> list[Translation]:
        feeds = {INPUT_NAME: tf.constant([sentences[i] for i in indices], dtype=tf.string)}
        for name in inputs or {}:
            feeds[name] = tf.constant([rows[i][name] for i in indices],
                                      dtype=tf.as_dtype(INPUT_DTYPES[name]))
        outputs = function(**feeds)
        return _decode(outputs[OUTPUT_TRANSLATIONS].numpy(), outputs[OUTPUT_SCORES].numpy(),
                       outputs[OUTPUT_ALIGNMENTS].numpy() if alignments else None)

    return [translation for batch in translate_in_batches(call, range(len(sentences)),
                                                          batch_size)
            for translation in batch]


def translate_saved_model_sample(sentences: Sequence[str], saved_model: Any,
                                 temperature: float | Sequence[float] = 1.0,
                                 top_k: int | Sequence[int] = 0,
                                 top_p: float | Sequence[float] = 1.0,
                                 seed: int | Sequence[int] = 0,
                                 signature: str = SAMPLE_SIGNATURE,
                                 batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate_sample`` in process."""
    return translate_saved_model(sentences, saved_model, signature, batch_size,
                                 inputs=_sample_inputs(temperature, top_k, top_p, seed))


def translate_saved_model_prefix(sentences: Sequence[str], prefixes: str | Sequence[str],
                                 saved_model: Any, signature: str = PREFIX_SIGNATURE,
                                 batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate_prefix`` in process."""
    return translate_saved_model(sentences, saved_model, signature, batch_size,
                                 inputs=_prefix_inputs(prefixes))


def translate_saved_model_align(sentences: Sequence[str], saved_model: Any,
                                signature: str = ALIGN_SIGNATURE,
                                batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate_align`` in process."""
    return translate_saved_model(sentences, saved_model, signature, batch_size, alignments=True)


def translate_saved_model_nbest(sentences: Sequence[str], k: int | Sequence[int],
                                saved_model: Any, signature: str = NBEST_SIGNATURE,
                                batch_size: int = DEFAULT_BATCH_SIZE
                                ) -> list[list[Translation]]:
    """The ``k`` best translations of each sentence, best first, in process (as
    ``translate_saved_model``); a ``k`` the model refuses raises tf.errors.InvalidArgumentError."""
    import tensorflow as tf

    sentences = _check_sentences(sentences)
    ks = _check_ks(k, len(sentences))
    function = _signature(saved_model, signature)

    def call(indices: list[int]) -> list[list[Translation]]:
        wanted = [ks[i] for i in indices]
        outputs = function(**{INPUT_NAME: tf.constant([sentences[i] for i in indices],
                                                      dtype=tf.string),
                              NBEST_K_NAME: tf.constant(wanted, dtype=tf.int32)})
        texts, scores = outputs[OUTPUT_TRANSLATIONS].numpy(), outputs[OUTPUT_SCORES].numpy()
        return [_decode(texts[row, :count], scores[row, :count])
                for row, count in enumerate(wanted)]

    return [row for batch in translate_in_batches(call, range(len(sentences)), batch_size)
            for row in batch]

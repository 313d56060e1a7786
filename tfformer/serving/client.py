"""Translate with the exported tfformer model: over TF Serving's gRPC API, or in process.

``translate()`` speaks the official ``tensorflow.serving.PredictionService`` protocol, so it works
unchanged against ``tensorflow_model_server`` and against ``tfformer.serving.server`` (the local
stand-in), and without importing TensorFlow (see `tfformer.serving.protos`): a client process
starts in a fraction of a second. ``translate_saved_model()`` calls the SavedModel's signature
in this process instead. Both take any signature of the export (``tfformer.contract``) and its
inputs by name: ``translate(sentences, signature="translate_nbest", k=4)`` gives the 4 best
hypotheses of each sentence, ``signature="translate_sample", temperature=0.8`` a sample,
``signature="translate_prefix", prefixes="Hello"`` a continuation, ``signature=
"translate_align"`` each translation's word alignment, ``signature="translate_document"``
each document's ``TranslatedDocument``, ``signature="score", targets=[...]`` each given
translation's ``Score``. Each input takes one value for every
sentence or a list of one per sentence: each is an input [batch] of the signature. A new
signature adds no function here: the contract names its inputs.

The ``tfformer-translate`` command (`tfformer.cli.translate`) wraps both.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
import warnings
from typing import Any, Iterable, Optional, Sequence

import grpc
import numpy as np

from tfformer.contract import (
    ALIGN_SIGNATURE,
    DEFAULT_SIGNATURE,
    DOCUMENT_SIGNATURE,
    INPUT_DEFAULTS,
    INPUT_DTYPES,
    INPUT_NAME,
    NBEST_K_NAME,
    NBEST_SIGNATURE,
    OUTPUT_ALIGNMENTS,
    OUTPUT_LENGTHS,
    OUTPUT_NORMALIZED_SCORES,
    OUTPUT_SCORES,
    OUTPUT_SENTENCES,
    OUTPUT_SPLITS,
    OUTPUT_TOKEN_SCORES,
    OUTPUT_TRANSLATIONS,
    PREFIX_SIGNATURE,
    PREFIXES_NAME,
    SAMPLE_SIGNATURE,
    SCORE_SIGNATURE,
    SEED_NAME,
    SIGNATURE_INPUTS,
    TARGETS_NAME,
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


@dataclasses.dataclass(frozen=True)
class Score:
    """A given translation's log P(target | source) (``score``), that / |Y| (``normalized``)
    and the log-probability of each of its pieces and of EOS (``token_scores``, |Y| values)."""

    score: float
    normalized: float
    token_scores: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class TranslatedDocument:
    """A document's translation (its separators kept) and, for each of its sentences, the
    score and the number of parts it was translated in (``splits``: 1 whole, k > 1 for a
    sentence over the model's limit, 0 for an empty one)."""

    text: str
    scores: tuple[float, ...]
    splits: tuple[int, ...]


DOCUMENT_OUTPUTS = (OUTPUT_TRANSLATIONS, OUTPUT_SCORES, OUTPUT_SPLITS, OUTPUT_SENTENCES)


def _documents(outputs: dict[str, Any]) -> list[TranslatedDocument]:
    """The TranslatedDocuments of a `translate_document` signature's outputs (arrays)."""
    count = len(outputs[OUTPUT_SENTENCES])
    scores, splits = (np.asarray(outputs[name]).reshape(count, -1)
                      for name in (OUTPUT_SCORES, OUTPUT_SPLITS))
    return [TranslatedDocument(_text(text), tuple(float(v) for v in score_row[:n]),
                               tuple(int(v) for v in split_row[:n]))
            for text, score_row, split_row, n in zip(
                outputs[OUTPUT_TRANSLATIONS], scores, splits, outputs[OUTPUT_SENTENCES],
                strict=True)]


SCORE_OUTPUTS = (OUTPUT_SCORES, OUTPUT_NORMALIZED_SCORES, OUTPUT_TOKEN_SCORES, OUTPUT_LENGTHS)


def _scored(outputs: dict[str, Any]) -> list[Score]:
    """The Scores of a `score` signature's outputs (arrays by name)."""
    token_scores = np.asarray(outputs[OUTPUT_TOKEN_SCORES])
    token_scores = token_scores.reshape(len(outputs[OUTPUT_LENGTHS]), -1)
    return [Score(float(score), float(normalized), tuple(row[:int(length)].tolist()))
            for score, normalized, row, length in zip(
                outputs[OUTPUT_SCORES], outputs[OUTPUT_NORMALIZED_SCORES], token_scores,
                outputs[OUTPUT_LENGTHS], strict=True)]


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
    request.output_filter.extend(
        SCORE_OUTPUTS if signature == SCORE_SIGNATURE else
        DOCUMENT_OUTPUTS if signature == DOCUMENT_SIGNATURE else
        [OUTPUT_TRANSLATIONS, OUTPUT_SCORES] + ([OUTPUT_ALIGNMENTS] if alignments else []))
    return request


def parse_score_response(response: predict_pb2.PredictResponse, expected: int,
                         server: Optional[str] = None) -> list[Score]:
    """The ``expected`` Scores of a ``score`` response."""
    return _scored(_rows(response, SCORE_OUTPUTS, expected, server))


def parse_document_response(response: predict_pb2.PredictResponse, expected: int,
                            server: Optional[str] = None) -> list[TranslatedDocument]:
    """The ``expected`` TranslatedDocuments of a ``translate_document`` response."""
    return _documents(_rows(response, DOCUMENT_OUTPUTS, expected, server))


def _rows(response: predict_pb2.PredictResponse, names: Sequence[str], expected: int,
          server: Optional[str]) -> dict[str, np.ndarray]:
    """The outputs `names` of a response, each checked to have `expected` rows."""
    arrays = {}
    for name in names:
        if name not in response.outputs:
            raise TranslationError(None, f"response has no output {name!r} "
                                         f"(outputs: {sorted(response.outputs)})", server)
        arrays[name] = make_ndarray(response.outputs[name])
        if len(arrays[name]) != expected:
            raise TranslationError(None, f"output {name!r} has {len(arrays[name])} rows for "
                                         f"{expected} inputs", server)
    return arrays


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
            if signature == SCORE_SIGNATURE:
                return parse_score_response(response, len(batch), target)
            if signature == DOCUMENT_SIGNATURE:
                return parse_document_response(response, len(batch), target)
            return parse_predict_response(response, len(batch), target, alignments=alignments)

        return [translation for batch in translate_in_batches(
            predict, range(len(sentences)), batch_size) for translation in batch]
    finally:
        if own_channel:
            channel.close()


def signature_inputs(signature: str, given: dict[str, Any], count: int) -> dict[str, Any]:
    """The inputs of `signature` besides ``inputs``, by name, for `count` sentences: each one
    given (one value for every sentence, or a list of one per sentence), the others their
    defaults (``tfformer.contract.INPUT_DEFAULTS``). A signature the contract does not name
    takes what is given."""
    names = SIGNATURE_INPUTS.get(signature)
    if names is None:
        return dict(given)
    names = [name for name in names if name != INPUT_NAME]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"{signature} takes {', '.join(names) or 'no other input'} besides "
                         f"{INPUT_NAME}, not {', '.join(unknown)}")
    feeds = {}
    for name in names:
        if name in given:
            feeds[name] = given[name]
        elif name in INPUT_DEFAULTS:
            feeds[name] = INPUT_DEFAULTS[name]
        else:
            raise ValueError(f"{signature} needs {name}")
    if NBEST_K_NAME in feeds:
        feeds[NBEST_K_NAME] = _check_ks(feeds[NBEST_K_NAME], count)
    for name in (PREFIXES_NAME, TARGETS_NAME):
        if name in feeds and not isinstance(feeds[name], str):
            feeds[name] = list(feeds[name])
    return feeds


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
    **inputs: Any,
) -> list[Translation] | list[list[Translation]] | list[TranslatedDocument] | list[Score]:
    """Translate ``sentences`` with a TF Serving (or ``tfformer.serving.server``) model over gRPC,
    with any of its signatures (``tfformer.contract``) and that signature's inputs by name,
    each one value for every sentence or a list of one per sentence::

        translate(sentences, server=SERVER)                                 # serving_default
        translate(sentences, server=SERVER, signature="translate_nbest", k=4)
        translate(sentences, server=SERVER, signature="translate_sample", temperature=0.8,
                  top_p=0.9, seed=[1, 2])
        translate(sentences, server=SERVER, signature="translate_prefix", prefixes="Hello")
        translate(sentences, server=SERVER, signature="score", targets=translations)

    An input left out takes its default (``contract.INPUT_DEFAULTS``: sampling's off values;
    ``k``, ``prefixes`` and ``targets`` are needed). ``translate_nbest`` gives a list of k
    ``Translation``s per sentence, best first; ``translate_align`` each with its
    ``alignment``; ``translate_document`` a ``TranslatedDocument`` per input; ``score`` a
    ``Score`` per (sentence, target) pair.

    One Predict call per ``batch_size`` sentences, each with ``timeout`` seconds. ``channel`` is
    used (and left open) when given; otherwise a channel to ``server`` is opened and closed.
    ``version`` pins ``ModelSpec.version``. Raises ``TranslationError`` (with ``.code`` and
    ``.details``) on any gRPC error (a value out of range: INVALID_ARGUMENT) or a response that
    does not fit the model's contract; ``ValueError`` for an input the signature does not take.
    """
    sentences = _check_sentences(sentences)
    feeds = signature_inputs(signature, inputs, len(sentences))
    return _predict_over_grpc(sentences, server, timeout, channel, batch_size, model,
                              signature, version, inputs=feeds, nbest=NBEST_K_NAME in feeds,
                              alignments=signature == ALIGN_SIGNATURE)


# The calls of each signature before `translate` took them all, kept for one release.

def translate_nbest(sentences: Sequence[str], k: int | Sequence[int],
                    server: str = DEFAULT_SERVER, model: str = DEFAULT_MODEL,
                    signature: str = NBEST_SIGNATURE, timeout: float = DEFAULT_TIMEOUT,
                    channel: Optional[grpc.Channel] = None, *, version: Optional[int] = None,
                    batch_size: int = DEFAULT_BATCH_SIZE) -> list[list[Translation]]:
    """``translate(..., signature="translate_nbest", k=k)``."""
    return translate(sentences, server, model, signature, timeout, channel, version=version,
                     batch_size=batch_size, k=k)


def translate_sample(sentences: Sequence[str],
                     temperature: float | Sequence[float] = INPUT_DEFAULTS[TEMPERATURE_NAME],
                     top_k: int | Sequence[int] = INPUT_DEFAULTS[TOP_K_NAME],
                     top_p: float | Sequence[float] = INPUT_DEFAULTS[TOP_P_NAME],
                     seed: int | Sequence[int] = INPUT_DEFAULTS[SEED_NAME],
                     server: str = DEFAULT_SERVER,
                     model: str = DEFAULT_MODEL, signature: str = SAMPLE_SIGNATURE,
                     timeout: float = DEFAULT_TIMEOUT, channel: Optional[grpc.Channel] = None,
                     *, version: Optional[int] = None,
                     batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate(..., signature="translate_sample", temperature=, top_k=, top_p=, seed=)``."""
    return translate(sentences, server, model, signature, timeout, channel, version=version,
                     batch_size=batch_size, temperature=temperature, top_k=top_k, top_p=top_p,
                     seed=seed)


def translate_prefix(sentences: Sequence[str], prefixes: str | Sequence[str],
                     server: str = DEFAULT_SERVER, model: str = DEFAULT_MODEL,
                     signature: str = PREFIX_SIGNATURE, timeout: float = DEFAULT_TIMEOUT,
                     channel: Optional[grpc.Channel] = None, *, version: Optional[int] = None,
                     batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate(..., signature="translate_prefix", prefixes=prefixes)``."""
    return translate(sentences, server, model, signature, timeout, channel, version=version,
                     batch_size=batch_size, prefixes=prefixes)


def translate_align(sentences: Sequence[str], server: str = DEFAULT_SERVER,
                    model: str = DEFAULT_MODEL, signature: str = ALIGN_SIGNATURE,
                    timeout: float = DEFAULT_TIMEOUT, channel: Optional[grpc.Channel] = None, *,
                    version: Optional[int] = None,
                    batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate(..., signature="translate_align")``."""
    return translate(sentences, server, model, signature, timeout, channel, version=version,
                     batch_size=batch_size)


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
                          batch_size: int = DEFAULT_BATCH_SIZE,
                          **inputs: Any
                          ) -> list[Translation] | list[list[Translation]] | list[Score]:
    """``translate`` in this process, with a loaded SavedModel (from ``load_saved_model``) or a
    path: any signature, its inputs by name, the same results. A value out of range raises
    tf.errors.InvalidArgumentError."""
    import tensorflow as tf

    legacy = inputs.pop(INPUT_NAME, None)  # this call's dict of inputs, before they were keywords
    if legacy is not None or inputs.pop("alignments", None) is not None:
        warnings.warn("translate_saved_model(inputs={...}, alignments=...) is deprecated: give "
                      "the signature's inputs as keywords; the signature says whether it has "
                      "alignments", DeprecationWarning, stacklevel=2)
        inputs = {**(legacy or {}), **inputs}
    sentences = _check_sentences(sentences)
    function = _signature(saved_model, signature)
    feeds = signature_inputs(signature, inputs, len(sentences))
    rows = _batch_inputs(feeds, len(sentences))
    nbest, alignments = NBEST_K_NAME in feeds, signature == ALIGN_SIGNATURE

    def call(indices: list[int]) -> list:
        batch = {INPUT_NAME: tf.constant([sentences[i] for i in indices], dtype=tf.string)}
        for name in feeds:
            batch[name] = tf.constant([rows[i][name] for i in indices],
                                      dtype=tf.as_dtype(INPUT_DTYPES[name]))
        outputs = function(**batch)
        if signature == SCORE_SIGNATURE:
            return _scored({name: outputs[name].numpy() for name in SCORE_OUTPUTS})
        if signature == DOCUMENT_SIGNATURE:
            return _documents({name: outputs[name].numpy() for name in DOCUMENT_OUTPUTS})
        texts, scores = outputs[OUTPUT_TRANSLATIONS].numpy(), outputs[OUTPUT_SCORES].numpy()
        if nbest:
            return [_decode(texts[row, :rows[i][NBEST_K_NAME]], scores[row, :rows[i][NBEST_K_NAME]])
                    for row, i in enumerate(indices)]
        return _decode(texts, scores, outputs[OUTPUT_ALIGNMENTS].numpy() if alignments else None)

    return [translation for batch in translate_in_batches(call, range(len(sentences)),
                                                          batch_size)
            for translation in batch]


def translate_saved_model_sample(sentences: Sequence[str], saved_model: Any,
                                 temperature: float | Sequence[float] =
                                 INPUT_DEFAULTS[TEMPERATURE_NAME],
                                 top_k: int | Sequence[int] = INPUT_DEFAULTS[TOP_K_NAME],
                                 top_p: float | Sequence[float] = INPUT_DEFAULTS[TOP_P_NAME],
                                 seed: int | Sequence[int] = INPUT_DEFAULTS[SEED_NAME],
                                 signature: str = SAMPLE_SIGNATURE,
                                 batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate_saved_model(..., signature="translate_sample", ...)``."""
    return translate_saved_model(sentences, saved_model, signature, batch_size,
                                 temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)


def translate_saved_model_prefix(sentences: Sequence[str], prefixes: str | Sequence[str],
                                 saved_model: Any, signature: str = PREFIX_SIGNATURE,
                                 batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate_saved_model(..., signature="translate_prefix", prefixes=prefixes)``."""
    return translate_saved_model(sentences, saved_model, signature, batch_size,
                                 prefixes=prefixes)


def translate_saved_model_align(sentences: Sequence[str], saved_model: Any,
                                signature: str = ALIGN_SIGNATURE,
                                batch_size: int = DEFAULT_BATCH_SIZE) -> list[Translation]:
    """``translate_saved_model(..., signature="translate_align")``."""
    return translate_saved_model(sentences, saved_model, signature, batch_size)


def translate_saved_model_nbest(sentences: Sequence[str], k: int | Sequence[int],
                                saved_model: Any, signature: str = NBEST_SIGNATURE,
                                batch_size: int = DEFAULT_BATCH_SIZE
                                ) -> list[list[Translation]]:
    """``translate_saved_model(..., signature="translate_nbest", k=k)``."""
    return translate_saved_model(sentences, saved_model, signature, batch_size, k=k)

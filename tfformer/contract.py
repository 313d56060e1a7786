"""The serving contract of an exported tfformer model, defined once for export, server and client.

A model base path holds one directory per version, named by its integer version number, each a
SavedModel. Its signatures `serving_default` and `translate` take `inputs`: tf.string [batch] and
return `translations`: tf.string [batch] and `scores`: float32 [batch].

Every input of every signature has the batch as dimension 0, one value per sentence, so that TF
Serving's request batching can merge requests (`SIGNATURE_INPUTS`):
- `translate_nbest`: `k` int32 [batch], 1 <= k <= the export's beam size (1 for a greedy
  export): the k best hypotheses of the beam, best first, as `translations`: tf.string
  [batch, K] and `scores`: float32 [batch, K], K the largest k of the request; a sentence's
  columns past its own k hold "" and -inf.
- `translate_sample`: `temperature` float32 (> 0), `top_k` int32 (>= 0; 0: off), `top_p`
  float32 (in (0, 1]; 1: off), `seed` int64 (>= 0): one sample per sentence; a seed gives the
  same sample everywhere. `scores`: the model's log P of the sample.
- `translate_prefix`: `prefixes` tf.string: the translation continues the sentence's prefix
  (target-side text, may be empty), with the export's search; `scores` are the continuation's.
- `translate_align`: `translate`'s outputs and `alignments`: tf.string [batch], the word
  alignment of each translation in the Pharaoh format ("i-j" pairs, space-separated, as
  fast_align writes them): for target piece j (0-based, EOS excluded) the source piece i it
  attends to most, in the cross-attention of the last decoder layer averaged over its heads
  (fairseq's `--print-alignment` convention); pieces are the tokenizer's SentencePiece pieces.
- `translate_document`: each input a document (sentences, lines, paragraphs): its sentences
  (`tfformer.decode.documents`' rule) translated as one batch with the export's search and
  joined back with the document's own separators, as `translations`: tf.string [batch];
  per sentence (S: the most sentences of a document of the batch, empty ones counted),
  `scores` float32 [batch, S] (0.0 for an empty sentence and past the document's) and
  `splits` int32 [batch, S]: 1 for a sentence translated whole, k > 1 for one over the
  model's max_length - 1 pieces, translated in k consecutive parts, 0 for an empty one and
  past the document's; `sentences` int32 [batch], each document's sentences.
- `score`: `targets` tf.string: given translations, scored by teacher forcing
  (`tfformer.decode.scoring`): `scores` float32 [batch], log P(target | source);
  `normalized_scores` float32 [batch], that / |Y|; `token_scores` float32 [batch, T], each
  piece's log-probability and EOS's, 0.0 past the pair's |Y| (T: the longest |Y| of the
  batch); `lengths` int32 [batch], |Y| = the target's pieces + 1. With learned positions a
  target may be at most the model's max_length - 1 pieces long; sinusoids take any length.
A value out of range fails in the graph (InvalidArgument, naming the input). Like TF Serving's
file system source, any other name than a version number (e.g. a staging directory renamed into
place when complete) is not a version.
"""

from __future__ import annotations

import os
import re
from typing import Any

DEFAULT_SIGNATURE = "serving_default"
TRANSLATE_SIGNATURE = "translate"
NBEST_SIGNATURE = "translate_nbest"
SAMPLE_SIGNATURE = "translate_sample"
PREFIX_SIGNATURE = "translate_prefix"
ALIGN_SIGNATURE = "translate_align"
DOCUMENT_SIGNATURE = "translate_document"
SCORE_SIGNATURE = "score"
BEST_SIGNATURE_NAMES = (DEFAULT_SIGNATURE, TRANSLATE_SIGNATURE)  # the best hypothesis only
SIGNATURE_NAMES = (*BEST_SIGNATURE_NAMES, NBEST_SIGNATURE, SAMPLE_SIGNATURE, PREFIX_SIGNATURE,
                   ALIGN_SIGNATURE, DOCUMENT_SIGNATURE, SCORE_SIGNATURE)
INPUT_NAME = "inputs"
NBEST_K_NAME = "k"  # translate_nbest's second input
TEMPERATURE_NAME = "temperature"
TOP_K_NAME = "top_k"
TOP_P_NAME = "top_p"
SEED_NAME = "seed"
PREFIXES_NAME = "prefixes"
TARGETS_NAME = "targets"  # score's second input
# Every input's dtype; each is a vector [batch].
INPUT_DTYPES = {INPUT_NAME: "string", NBEST_K_NAME: "int32", TEMPERATURE_NAME: "float32",
                TOP_K_NAME: "int32", TOP_P_NAME: "float32", SEED_NAME: "int64",
                PREFIXES_NAME: "string", TARGETS_NAME: "string"}
# What an input left out of a request means to the clients (the off values of sampling); `k`
# and `prefixes` have none. The signatures themselves take every input they name.
INPUT_DEFAULTS = {TEMPERATURE_NAME: 1.0, TOP_K_NAME: 0, TOP_P_NAME: 1.0, SEED_NAME: 0}
SIGNATURE_INPUTS = {
    DEFAULT_SIGNATURE: (INPUT_NAME,),
    TRANSLATE_SIGNATURE: (INPUT_NAME,),
    NBEST_SIGNATURE: (INPUT_NAME, NBEST_K_NAME),
    SAMPLE_SIGNATURE: (INPUT_NAME, TEMPERATURE_NAME, TOP_K_NAME, TOP_P_NAME, SEED_NAME),
    PREFIX_SIGNATURE: (INPUT_NAME, PREFIXES_NAME),
    ALIGN_SIGNATURE: (INPUT_NAME,),
    DOCUMENT_SIGNATURE: (INPUT_NAME,),
    SCORE_SIGNATURE: (INPUT_NAME, TARGETS_NAME),
}
OUTPUT_TRANSLATIONS = "translations"
OUTPUT_SCORES = "scores"
OUTPUT_ALIGNMENTS = "alignments"  # translate_align's third output
# score's outputs besides `scores`.
OUTPUT_NORMALIZED_SCORES = "normalized_scores"
OUTPUT_TOKEN_SCORES = "token_scores"
OUTPUT_LENGTHS = "lengths"
# translate_document's outputs besides `translations` and `scores`.
OUTPUT_SPLITS = "splits"
OUTPUT_SENTENCES = "sentences"
OUTPUT_NAMES = (OUTPUT_TRANSLATIONS, OUTPUT_SCORES)
DEFAULT_MODEL_NAME = "tfformer"

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_VERSION_NAME = re.compile(r"[0-9]+")


def is_version_name(name: str) -> bool:
    """Whether a directory name is a version number."""
    return _VERSION_NAME.fullmatch(name) is not None


def has_saved_model(path: str) -> bool:
    """Whether `path` holds a saved_model.pb (or .pbtxt)."""
    return any(os.path.isfile(os.path.join(path, f)) for f in SAVED_MODEL_FILES)


def read_saved_model(path: str | os.PathLike) -> Any:
    """The `SavedModel` proto of the SavedModel directory `path` (saved_model.pb, else
    .pbtxt); loads TensorFlow's protos, which this module otherwise does not."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    binary, text = (os.path.join(path, name) for name in SAVED_MODEL_FILES)
    if os.path.isfile(binary):
        with open(binary, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(text, encoding="utf-8") as f:
            text_format.Parse(f.read(), saved_model)
    return saved_model


def list_versions(model_base_path: str) -> dict[int, str]:
    """Version number -> directory, for the servable versions under `model_base_path`: the
    integer-named subdirectories that hold a SavedModel."""
    try:
        names = os.listdir(model_base_path)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    versions = {}
    for name in names:
        path = os.path.join(model_base_path, name)
        if is_version_name(name) and has_saved_model(path):
            versions[int(name)] = path
    return versions


def saved_model_dir(path: str) -> str | None:
    """The SavedModel that `path` names: `path` itself when it holds one, else its highest
    version (a model base path, TF Serving's `BASE/NAME`); None when it is neither."""
    if has_saved_model(path):
        return path
    versions = list_versions(path)
    return versions[max(versions)] if versions else None


def next_version(model_base_path: str) -> int:
    """One above the highest version number present (any integer-named directory counts, so
    that a version being written is never overwritten), or 1."""
    try:
        names = os.listdir(model_base_path)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return max((int(n) for n in names if is_version_name(n)), default=0) + 1

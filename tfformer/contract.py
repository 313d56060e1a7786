"""The serving contract of an exported tfformer model, defined once for export, server and client.

A model base path holds one directory per version, named by its integer version number, each a
SavedModel. Its signatures `serving_default` and `translate` take `inputs`: tf.string [batch] and
return `translations`: tf.string [batch] and `scores`: float32 [batch]. Like TF Serving's file
system source, any other name (e.g. a staging directory renamed into place when complete) is
not a version.
"""

from __future__ import annotations

import os
import re

DEFAULT_SIGNATURE = "serving_default"
TRANSLATE_SIGNATURE = "translate"
SIGNATURE_NAMES = (DEFAULT_SIGNATURE, TRANSLATE_SIGNATURE)
INPUT_NAME = "inputs"
OUTPUT_TRANSLATIONS = "translations"
OUTPUT_SCORES = "scores"
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


def next_version(model_base_path: str) -> int:
    """One above the highest version number present (any integer-named directory counts, so
    that a version being written is never overwritten), or 1."""
    try:
        names = os.listdir(model_base_path)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return max((int(n) for n in names if is_version_name(n)), default=0) + 1

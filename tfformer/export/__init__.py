"""Writing a run for deployment: the SavedModel that TF Serving runs (`saved_model`: signatures,
op-set and fresh-process checks; `warmup`: the requests TF Serving replays on loading it) and the
CTranslate2 model directory (`ctranslate2`). The serving contract they keep is
`tfformer.contract`.

`from tfformer.export import export_saved_model` (and the other names of `saved_model`) load
that module, and TensorFlow, when first used.
"""

from __future__ import annotations

import importlib

_SAVED_MODEL_NAMES = ("ExportError", "check_ops", "export_saved_model", "saved_model_ops",
                      "serving_op_allowlist", "translate_in_fresh_process")


def __getattr__(name: str):
    if name in _SAVED_MODEL_NAMES:
        return getattr(importlib.import_module("tfformer.export.saved_model"), name)
    raise AttributeError(f"module 'tfformer.export' has no attribute {name!r}")

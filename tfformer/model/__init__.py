"""The model, on any Keras 3 backend in `keras.ops`: the Transformer (`transformer`), its layers
(`layers`, paper §3), the objective and metrics (`losses`, §5.4), the learning-rate schedule
(`schedule`, §5.3), `compile_transformer`, the dtype policies (`precision`) and the Keras
workarounds (`compat`).

`from tfformer.model import Transformer` loads the Transformer's module (and Keras) when first
used, as `import tfformer` does.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"Transformer": "tfformer.model.transformer",
            "compile_transformer": "tfformer.model.compile_transformer"}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tfformer.model' has no attribute {name!r}")

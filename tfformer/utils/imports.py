"""What `import tfformer` sets up without importing anything heavy: Keras finds tfformer's
classes in a saved file.

A `.keras` file names them `tfformer>Transformer`, `tfformer>MultiHeadAttention`, ...; Keras
imports a class's module by itself only for its own packages and KerasHub, so
`keras.saving.load_model` would fail until something imported tfformer's model. `import tfformer`
cannot import the model (it would load Keras before a program chooses the backend), so Keras'
registry is taught to load tfformer's serializable modules when it is first asked for a
`tfformer>` name: when Keras is already imported, or else as soon as it is (`on_import`, which
`tfformer.serving.protos` uses too).
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable

# The modules whose classes a saved model names (`tfformer>...`): importing them registers them.
SERIALIZABLE_MODULES = ("tfformer.model.transformer", "tfformer.model.losses",
                        "tfformer.model.schedule", "tfformer.model.adam")
_REGISTERED_PREFIX = "tfformer>"


class _LazyRegistry(dict):
    """Keras' global registry of custom objects, which imports tfformer's serializable modules
    the first time a `tfformer>` name is missing from it."""

    _loaded = False

    def _load(self, key) -> None:
        if (not self._loaded and isinstance(key, str) and key.startswith(_REGISTERED_PREFIX)
                and not dict.__contains__(self, key)):
            type(self)._loaded = True
            for name in SERIALIZABLE_MODULES:
                importlib.import_module(name)

    def __contains__(self, key):
        self._load(key)
        return dict.__contains__(self, key)

    def __getitem__(self, key):
        self._load(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._load(key)
        return dict.get(self, key, default)


def _teach_keras() -> None:
    """Puts the lazy registry in Keras' place (Keras must be imported)."""
    registration = sys.modules.get("keras.src.saving.object_registration")
    if registration is None or isinstance(registration.GLOBAL_CUSTOM_OBJECTS, _LazyRegistry):
        return
    registration.GLOBAL_CUSTOM_OBJECTS = _LazyRegistry(registration.GLOBAL_CUSTOM_OBJECTS)


# The finder and loader below follow importlib's protocols without subclassing importlib.abc,
# whose import (importlib.resources, tempfile, ...) would triple `import tfformer`'s time.
class _ImportHooks:
    """Runs callables around the next loading of named modules: each `before(module)` ahead of
    the module's own code, each `after(module)` once it ran (`on_import`)."""

    def __init__(self):
        self.hooks: dict[str, tuple[list, list]] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoaderAround(spec.loader, *self.hooks.pop(fullname))
                return spec
        return None


class _LoaderAround:
    def __init__(self, loader, before: list, after: list):
        self._loader = loader
        self._before = before
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        for hook in self._before:
            hook(module)
        self._loader.exec_module(module)
        for hook in self._after:
            hook(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


_IMPORT_HOOKS = _ImportHooks()


def on_import(name: str, *, before: Callable | None = None,
              after: Callable | None = None) -> None:
    """Runs `before(module)` / `after(module)` around the next loading of module `name`."""
    if _IMPORT_HOOKS not in sys.meta_path:
        sys.meta_path.insert(0, _IMPORT_HOOKS)
    befores, afters = _IMPORT_HOOKS.hooks.setdefault(name, ([], []))
    if before is not None:
        befores.append(before)
    if after is not None:
        afters.append(after)


def install() -> None:
    """Teaches Keras' registry now, or when Keras is imported (once per process)."""
    if "keras" in sys.modules:
        _teach_keras()
    elif "keras" not in _IMPORT_HOOKS.hooks:
        on_import("keras", after=lambda keras: _teach_keras())

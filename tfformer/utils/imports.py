"""What `import tfformer` sets up without importing anything heavy.

* **The old module names.** The package's modules moved into one folder per layer; for one
  release each old name (`tfformer.search`, `tfformer.tokenizer`, ...) still imports, as a module
  that forwards to the new one and warns once (DeprecationWarning) where it is imported.
* **Keras finds tfformer's classes in a saved file.** A `.keras` file names them
  `tfformer>Transformer`, `tfformer>MultiHeadAttention`, ...; Keras imports a class's module by
  itself only for its own packages and KerasHub, so `keras.saving.load_model` would fail until
  something imported tfformer's model. `import tfformer` cannot import the model (it would load
  Keras before a program chooses the backend), so Keras' registry is taught to load tfformer's
  serializable modules when it is first asked for a `tfformer>` name: when Keras is already
  imported, or else as soon as it is.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings
from typing import Callable

# Old dotted module name -> its home now. The old names go in the release after next.
MOVED_MODULES = {
    "tfformer.attention_maps": "tfformer.decode.attention_maps",
    "tfformer.backends": "tfformer.utils.backends",
    "tfformer.batch_translate": "tfformer.decode.batch_translate",
    "tfformer.callbacks": "tfformer.train.callbacks",
    "tfformer.checkpoints": "tfformer.train.checkpoints",
    "tfformer.compat": "tfformer.model.compat",
    "tfformer.compilations": "tfformer.train.compilations",
    "tfformer.ctranslate2_export": "tfformer.export.ctranslate2",
    "tfformer.data.run_data": "tfformer.train.inputs",
    "tfformer.distribute": "tfformer.train.devices",
    "tfformer.eager_search": "tfformer.decode.keras_search",
    "tfformer.files": "tfformer.utils.files",
    "tfformer.layers": "tfformer.model.layers",
    "tfformer.layers.attention": "tfformer.model.layers.attention",
    "tfformer.layers.decoder": "tfformer.model.layers.decoder",
    "tfformer.layers.embedding": "tfformer.model.layers.embedding",
    "tfformer.layers.encoder": "tfformer.model.layers.encoder",
    "tfformer.layers.feed_forward": "tfformer.model.layers.feed_forward",
    "tfformer.layers.kernels": "tfformer.model.layers.kernels",
    "tfformer.layers.residual": "tfformer.model.layers.residual",
    "tfformer.layers.stack": "tfformer.model.layers.stack",
    "tfformer.losses": "tfformer.model.losses",
    "tfformer.plots": "tfformer.train.plots",
    "tfformer.precision": "tfformer.model.precision",
    "tfformer.run_dir": "tfformer.utils.run_dir",
    "tfformer.run_state": "tfformer.train.state",
    "tfformer.run_steps": "tfformer.train.steps",
    "tfformer.schedule": "tfformer.model.schedule",
    "tfformer.search": "tfformer.decode.search",
    "tfformer.settings": "tfformer.train.settings",
    "tfformer.tokenizer": "tfformer.data.tokenizer",
    "tfformer.training": "tfformer.train.fit",
    "tfformer.translator": "tfformer.decode.translator",
    "tfformer.validate": "tfformer.utils.checks",
}
# Names that left their old module for another one (old module -> {name: new module}).
MOVED_NAMES = {
    "tfformer.train.fit": {"compile_transformer": "tfformer.model.compile_transformer"},
    "tfformer.train.state": {"RunState": "tfformer.train.callbacks.run_state"},
    "tfformer.train.checkpoints": {
        "KeepLastCheckpoints": "tfformer.train.callbacks.keep_last_checkpoints"},
    "tfformer.train.inputs": {"LogDataCounters": "tfformer.train.callbacks.data_logs",
                              "LogBatchShapes": "tfformer.train.callbacks.data_logs"},
    "tfformer.model.precision": {name: "tfformer.utils.cpu" for name in (
        "BF16_CPU_FLAGS", "MATMUL_CPU_FLAGS", "cpu_flags", "matmul_flags", "bf16_flags",
        "describe_bf16_support")} | {"has_accelerator": "tfformer.utils.backends"},
}
# The modules whose classes a saved model names (`tfformer>...`): importing them registers them.
SERIALIZABLE_MODULES = ("tfformer.model.transformer", "tfformer.model.losses",
                        "tfformer.model.schedule", "tfformer.model.adam")
_REGISTERED_PREFIX = "tfformer>"


def _forwarding_module(old: str) -> types.ModuleType:
    new = MOVED_MODULES[old]
    module = types.ModuleType(old, f"Deprecated: moved to {new}.")
    moved_names = MOVED_NAMES.get(new, {})

    def __getattr__(name: str):
        if name in moved_names:
            return getattr(importlib.import_module(moved_names[name]), name)
        return getattr(importlib.import_module(new), name)

    def __dir__():
        return sorted(set(dir(importlib.import_module(new))) | set(moved_names))

    module.__getattr__ = __getattr__
    module.__dir__ = __dir__
    module.__path__ = []  # a package, so that the old names of its submodules import too
    return module


# The finders and loaders below follow importlib's protocols without subclassing importlib.abc,
# whose import (importlib.resources, tempfile, ...) would triple `import tfformer`'s time.
class _MovedModuleFinder:
    """Imports an old module name as a module that forwards to the new one."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        # stacklevel 2: the import statement (warnings skips importlib's own frames)
        warnings.warn(f"{spec.name} moved to {MOVED_MODULES[spec.name]}; the old name goes in "
                      "the release after next", DeprecationWarning, stacklevel=2)
        return _forwarding_module(spec.name)

    def exec_module(self, module):
        pass


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
    """Sets up both (once per process)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
    if "keras" in sys.modules:
        _teach_keras()
    elif "keras" not in _IMPORT_HOOKS.hooks:
        on_import("keras", after=lambda keras: _teach_keras())

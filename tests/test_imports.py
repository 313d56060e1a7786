"""What `import tfformer` promises: it stays light, a program still chooses the Keras backend
after it, Keras' own `load_model` finds tfformer's classes after it in either import order, and
the module names from before the package's folders still import, warning where they moved."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tfformer.utils.imports import MOVED_MODULES, MOVED_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_RUN = os.path.join(ROOT, "tests", "data", "run-v0.1")  # saved before the folders existed


def run_python(code: str, backend: str = "tensorflow") -> dict:
    """Runs `code` in a fresh process on `backend`; returns the JSON it prints last."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A copy of the old run directory with an averaged model beside its model.keras."""
    directory = tmp_path_factory.mktemp("imports") / "run"
    shutil.copytree(OLD_RUN, directory)
    averaged = run_python("import json; from tfformer import run; "
                          f"print(json.dumps(run.average({str(directory)!r}, last=1)))")
    assert averaged == str(directory / "model-avg1.keras")
    return directory


LOAD = """
import json, sys
{first}
{second}
model = keras.saving.load_model({model!r})
ckpt = keras.saving.load_model({model!r})
ckpt.load_weights({checkpoint!r})
averaged = keras.saving.load_model({averaged!r})
print(json.dumps({{"backend": keras.backend.backend(), "class": type(model).__module__ + "."
                  + type(model).__name__, "averaged": type(averaged).__name__,
                  "params": model.count_params(), "checkpoint": ckpt.count_params()}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
@pytest.mark.parametrize("keras_first", [False, True], ids=["tfformer-first", "keras-first"])
def test_keras_load_model_finds_tfformer_classes_after_import_tfformer(run_dir, backend,
                                                                       keras_first):
    imports = ["import tfformer", "import keras"]
    if keras_first:
        imports.reverse()
    found = run_python(LOAD.format(
        first=imports[0], second=imports[1], model=str(run_dir / "model.keras"),
        checkpoint=str(next((run_dir / "checkpoints").iterdir())),
        averaged=str(run_dir / "model-avg1.keras")), backend)
    assert found["backend"] == backend
    assert found["class"] == "tfformer.model.transformer.Transformer"
    assert found["averaged"] == "Transformer"
    assert found["params"] == found["checkpoint"] > 0


def test_without_import_tfformer_keras_cannot_load_the_model():
    """The test above is not vacuous: Keras alone does not find the classes."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", "import keras; keras.saving.load_model("
         f"{os.path.join(OLD_RUN, 'model.keras')!r})"],
        capture_output=True, text=True, env=env, cwd="/", timeout=300)
    assert done.returncode != 0
    assert "Transformer" in done.stderr


def test_import_tfformer_is_light_and_the_backend_is_chosen_after_it():
    found = run_python("""
import json, os, sys
import tfformer
light = not any(name in sys.modules for name in ("keras", "tensorflow", "jax"))
os.environ["KERAS_BACKEND"] = "jax"
import keras
print(json.dumps({"light": light, "backend": keras.backend.backend(),
                  "model": tfformer.Transformer.__module__}))
""")
    assert found == {"light": True, "backend": "jax", "model": "tfformer.model.transformer"}


def test_every_old_module_name_imports_warns_and_forwards_to_its_new_home():
    found = run_python("""
import importlib, json, warnings
import tfformer
from tfformer.utils.imports import MOVED_MODULES, MOVED_NAMES
result = {}
for old, new in MOVED_MODULES.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    target = importlib.import_module(new)
    public = [n for n in dir(target) if not n.startswith("_")]
    same = all(getattr(module, n) is getattr(target, n) for n in public)
    moved = {n: getattr(module, n) is getattr(importlib.import_module(m), n)
             for n, m in MOVED_NAMES.get(new, {}).items()}
    result[old] = {"warned": [str(w.message) for w in caught
                              if issubclass(w.category, DeprecationWarning)],
                   "same": same, "public": len(public), "moved": moved}
print(json.dumps(result))
""")
    assert sorted(found) == sorted(MOVED_MODULES)
    for old, new in MOVED_MODULES.items():
        assert found[old]["warned"] == [
            f"{old} moved to {new}; the old name goes in the release after next"], old
        assert found[old]["same"] and found[old]["public"] > 0, old
        assert all(found[old]["moved"].values()), (old, found[old]["moved"])
    assert set(MOVED_NAMES) <= set(MOVED_MODULES.values())


def test_moved_names_live_in_their_new_module_only():
    import importlib

    for old, names in MOVED_NAMES.items():
        for name, new in names.items():
            value = getattr(importlib.import_module(new), name)
            # The old module may use it (imported from the new one), never define its own.
            assert getattr(importlib.import_module(old), name, value) is value, (old, name)

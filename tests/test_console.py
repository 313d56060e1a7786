"""The console scripts' TensorFlow import: without the packages TensorFlow would load for
integrations no script uses, on the TensorFlow backend only, and with those packages usable
afterwards; its objects frozen out of the cyclic garbage collector."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPORT = """
import gc, json, sys
from tfformer.cli.console import import_tensorflow
from tfformer.utils.backends import chosen_backend
backend = chosen_backend()
import_tensorflow()
report = {"backend": backend,
          "imported": sorted(name for name in ("tensorflow", "keras", "matplotlib", "jax")
                             if name in sys.modules),
          "frozen": gc.get_freeze_count(), "collecting": gc.isenabled()}
if "tensorflow" in sys.modules:
    import jax
    import keras
    import matplotlib.pyplot
    report["then"] = [keras.backend.backend(), jax.numpy.add(1, 2).item(),
                      matplotlib.pyplot.figure().number]
print("REPORT", json.dumps(report))
"""


def report(tmp_path, **env) -> dict:
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("KERAS_BACKEND", "KERAS_HOME")}
    environment.update(PYTHONPATH=ROOT, KERAS_HOME=str(tmp_path / "keras-home"),
                       MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="2", **env)
    result = subprocess.run([sys.executable, "-c", REPORT], env=environment, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    return json.loads(line[len("REPORT "):])


def test_tensorflow_is_imported_without_matplotlib_and_jax_which_still_import_after(tmp_path):
    got = report(tmp_path)
    assert got["backend"] == "tensorflow"
    assert got["imported"] == ["keras", "tensorflow"]
    # The import's objects are frozen out of the cyclic garbage collector's reach, which
    # collects again afterwards.
    assert got["frozen"] > 100_000 and got["collecting"]
    assert got["then"] == ["tensorflow", 3, 1]


def test_on_another_backend_nothing_is_imported(tmp_path):
    """KERAS_BACKEND, else keras.json in KERAS_HOME, as Keras reads them: a JAX run of
    tfformer-train imports TensorFlow only if it needs it, and then as usual."""
    nothing = {"backend": "jax", "imported": [], "frozen": 0, "collecting": True}
    assert report(tmp_path, KERAS_BACKEND="jax") == nothing
    (tmp_path / "keras-home").mkdir()
    (tmp_path / "keras-home" / "keras.json").write_text(json.dumps({"backend": "jax"}))
    assert report(tmp_path) == nothing
    assert report(tmp_path, KERAS_BACKEND="tensorflow")["imported"] == ["keras", "tensorflow"]


def test_without_tensorflow_installed_nothing_is_imported(tmp_path):
    """On a machine with JAX only (the GPU machine), where Keras' default backend cannot load:
    the script goes on as it would have, to its own error if it needs TensorFlow."""
    script = ("import importlib.util, sys\n"
              "find_spec = importlib.util.find_spec\n"
              "importlib.util.find_spec = lambda name, *args: (\n"
              "    None if name == 'tensorflow' else find_spec(name, *args))\n"
              "from tfformer.cli.console import import_tensorflow\n"
              "import_tensorflow()\n"
              "print('IMPORTED', sorted(n for n in ('tensorflow', 'keras', 'jax')\n"
              "                         if n in sys.modules))\n")
    environment = {name: value for name, value in os.environ.items() if name != "KERAS_BACKEND"}
    result = subprocess.run([sys.executable, "-c", script], env={**environment, "PYTHONPATH": ROOT},
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "IMPORTED []" in result.stdout


TRAIN_REPORT = """
import sys
from tfformer import run
from tfformer.cli import train

def fake_train(*args, **kwargs):  # what the run would train with, then stop before any work
    from tensorflow.python.util import _pywrap_util_port
    print("ONEDNN", _pywrap_util_port.IsMklEnabled())
    raise ValueError("stopped by the test")

run.train = fake_train
sys.exit(train.main(["--out", sys.argv[1]]))
"""


def test_training_runs_with_onednn_unless_the_environment_turns_it_off(tmp_path):
    """tfformer-train asks for oneDNN's kernels (faster training where TensorFlow leaves them
    off: AVX2-only CPUs); TF_ENABLE_ONEDNN_OPTS=0 given by the user still turns them off."""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("KERAS_BACKEND", "TF_ENABLE_ONEDNN_OPTS")}
    environment.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    for given, expected in ((None, "True"), ("0", "False")):
        env = environment if given is None else {**environment, "TF_ENABLE_ONEDNN_OPTS": given}
        result = subprocess.run([sys.executable, "-c", TRAIN_REPORT, str(tmp_path / "run")],
                                env=env, cwd=tmp_path, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 2 and "stopped by the test" in result.stderr, \
            result.stderr[-3000:]
        assert f"ONEDNN {expected}" in result.stdout, (given, result.stdout)


def test_exit_status_names_each_kind_of_failure_in_one_line(caplog):
    import errno
    import logging

    import pytest

    from tfformer.cli.console import exit_status

    logger = logging.getLogger("tfformer.test")

    def raising(error):
        def body():
            raise error
        return body

    def status(body, **kinds):
        caplog.clear()
        code = exit_status(body, logger, refused=(ValueError,), failed=(RuntimeError,),
                           full_disk_advice="Run it again.", **kinds)
        return code, [r.getMessage() for r in caplog.records]

    done = []
    assert status(lambda: done.append(1)) == (0, []) and done == [1]
    assert status(raising(ValueError("bad --x"))) == (2, ["bad --x"])
    assert status(raising(RuntimeError("check failed"))) == (1, ["check failed"])
    assert status(raising(ValueError("a\nb")), describe=lambda e: str(e).split("\n")[0]) == (
        2, ["a"])
    assert status(raising(PermissionError(errno.EACCES, "Permission denied", "/r/x"))) == (
        1, ["/r/x: Permission denied"])
    wrapped = OSError(errno.ENOSPC, "No space left on device", "/r/a.h5")
    try:
        try:
            raise wrapped
        except OSError as error:
            raise KeyError("saving failed") from error
    except KeyError as outer:  # a cause is followed
        assert status(raising(outer)) == (
            1, ["/r/a.h5: no space left on device. Run it again."])
    with pytest.raises(KeyError):  # a bug's traceback
        exit_status(raising(KeyError("x")), logger)

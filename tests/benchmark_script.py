"""The scripts of benchmarks/ (not a package) as modules, for the tests of their functions."""

import glob
import importlib.util
import os
from types import ModuleType

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/FOLDER/NAME.py, loaded as a module named NAME."""
    [path] = glob.glob(os.path.join(BENCHMARKS, "*", f"{name}.py"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""The interpreter of the TF 2.20 compat venv, for the checks that an export runs where stock
TF Serving does."""

from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compat_python():
    """The second virtualenv (tensorflow 2.20.0 + tensorflow-text 2.20.0) that `make test`
    builds, standing in for the TF/TF Text versions a stock TF Serving binary links."""
    path = os.environ.get("TFFORMER_COMPAT_PYTHON",
                          os.path.join(ROOT, ".venv-tf2.20", "bin", "python"))
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail(f"{path} missing: `make test` builds it (target .venv-tf2.20)")
        pytest.skip(f"{path} missing: run `make test` to build the TF 2.20 compat venv")
    return path

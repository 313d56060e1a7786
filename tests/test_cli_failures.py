"""A file the command cannot write at run time (here a directory without write permission) ends
each console script with one line naming the path and the error, exit 1, never a traceback.

Root writes through any permission bits (CAP_DAC_OVERRIDE): run as root, each command runs
without that capability, as a user would."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from tests.test_run_state import SMALL_ARCHITECTURE, small_settings
from tests.test_training import env

PR_CAPBSET_DROP = 24
# CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: what lets root write anywhere.
PERMISSION_BYPASSING_CAPABILITIES = (1, 2, 3)


def without_root_powers() -> None:
    """In the child before exec: drop the capabilities that let root ignore permission bits
    from the bounding set, so that the command's process cannot hold them."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in PERMISSION_BYPASSING_CAPABILITIES:
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {capability})")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A directory with a small finished run, a test set and `readonly/`, which no one may
    write."""
    from tfformer import run
    from tfformer.data.builtin import builtin_pairs

    directory = tmp_path_factory.mktemp("failures")
    run.train(directory / "run", "tiny", small_settings(steps=4), SMALL_ARCHITECTURE)
    (directory / "test.tsv").write_text("".join(
        f"{source}\t{target}\n" for source, target in builtin_pairs("test", 4)), encoding="utf-8")
    (directory / "readonly").mkdir()
    os.chmod(directory / "readonly", 0o555)
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("module, args", [
    ("prepare", ["--data", "builtin:100", "--out", "readonly/store", "--vocab-size", "120"]),
    ("export", ["run", "--model-base-path", "readonly/models"]),
    ("average", ["run", "--last", "2", "--out", "readonly/avg.keras"]),
    ("evaluate", ["run", "--data", "test.tsv", "--beam-size", "1", "--out", "readonly/eval"]),
    ("score", ["run", "--data", "test.tsv", "--output", "readonly/scores.txt"]),
    ("train", ["--out", "readonly/run", "--data", "builtin:100", "--steps", "1",
               "--vocab-size", "120", "--verbose", "0"]),
])
def test_a_directory_without_write_permission_is_named_in_one_line(place, module, args):
    result = subprocess.run(
        [sys.executable, "-m", f"tfformer.cli.{module}", *args], cwd=place, env=env(),
        capture_output=True, text=True, timeout=300,
        preexec_fn=without_root_powers if os.geteuid() == 0 else None)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    [line] = [line for line in result.stderr.splitlines() if "Permission denied" in line]
    assert "readonly/" in line, line

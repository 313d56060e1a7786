"""What several benchmarks share: the checkout's paths, a progress log on stderr, running a
tfformer command, and the machine a result was measured on.

A benchmark in a folder of benchmarks/ puts this folder first on sys.path (`import common`),
which also lets it import a benchmark of another folder (`from decoding.decode import build`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCHMARKS)  # the checkout
BIN = os.path.dirname(sys.executable)  # where the tfformer-* console scripts are installed


def logger(name: str):
    """A function that writes `[name HH:MM:SS] message` to stderr (stdout holds the JSON)."""
    def log(message: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
    return log


def run(*command: str, log_to: str | None = None, log=None) -> str:
    """Runs a command in the checkout and returns its stdout; its stderr goes to `log_to` (a
    file) when given, the command line to `log`. Raises RuntimeError naming the command when
    it fails."""
    if log is not None:
        log(" ".join(command))
    with (open(log_to, "w", encoding="utf-8") if log_to
          else contextlib.nullcontext(subprocess.PIPE)) as stderr:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if result.returncode:
        raise RuntimeError(f"{command[0]} failed: {result.stderr or log_to}")
    return result.stdout


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

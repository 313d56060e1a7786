"""Writing files so that a kill at any moment leaves the old version or the new, never half."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import re
import shutil
import time
from typing import Any, Callable

TMP_PREFIX = ".tmp-"


def _fsync(path: str) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.path.isdir(path) else os.O_RDONLY
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_write(path: str, write: Callable[[str], Any]) -> None:
    """Calls `write(temporary_path)`, then renames the result to `path` in one step.

    The temporary name keeps `path`'s ending (Keras checks `.keras` / `.weights.h5`) behind a
    `.tmp-` prefix, in the same directory, so the rename never crosses file systems.
    """
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, TMP_PREFIX + name)
    write(temporary)
    _fsync(temporary)
    os.replace(temporary, path)
    _fsync(directory)


def atomic_write_text(path: str, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically."""

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def atomic_copy(source: str, path: str) -> None:
    """Copies the file `source` to `path` atomically (`atomic_write`)."""
    atomic_write(path, lambda temporary: shutil.copyfile(source, temporary))


def sha256_of(path: str) -> str:
    """The SHA-256 of a file's bytes, read a MiB at a time (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def remove_temporaries(directory: str) -> list[str]:
    """Deletes what killed writers left behind in `directory` (never the files they replace)."""
    removed = []
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if name.startswith(TMP_PREFIX):
                os.remove(os.path.join(directory, name))
                removed.append(name)
    return removed


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_MESSAGES = ("No space left on device", "Disk quota exceeded")
_DENIED_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
_DENIED_MESSAGES = ("Permission denied", "Read-only file system")


@dataclasses.dataclass(frozen=True)
class FileFailure:
    """A file the command could not write or read at run time: its path ("" when the error
    does not name it), why, and whether its disk (or quota) was full."""

    path: str
    reason: str
    full_disk: bool

    def line(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


def file_failure(error: BaseException) -> FileFailure | None:
    """The first of `error` and its causes that is a permission, a read-only file system or a
    full disk; None when there is none.

    Reads the path from the OSError's `filename`, else from h5py's message ("Unable to
    synchronously create file (unable to open file: name = 'PATH', errno = 28, ...)", whose
    OSError has none) or TensorFlow's (an `OpError`, not an OSError, whose first line names it).
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        named = re.search(r"name = '([^']*)'", text)
        full = any(message in text for message in _FULL_MESSAGES)
        if isinstance(error, OSError) and error.errno in _DENIED_ERRNOS + _FULL_ERRNOS:
            path = os.fsdecode(error.filename) if error.filename else (
                named.group(1) if named else "")
            reason = error.strerror or os.strerror(error.errno)
            return FileFailure(path, reason if path else text.splitlines()[0],
                               full or error.errno in _FULL_ERRNOS)
        if full or any(message in text for message in _DENIED_MESSAGES):
            first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
            return FileFailure(named.group(1) if named else "", first, full)
        error = error.__cause__ or error.__context__
    return None


def full_disk_path(error: BaseException) -> str | None:
    """The file a write failed on because its disk (or quota) was full (`file_failure`); ""
    when the error does not name it; None when `error` is something else."""
    failure = file_failure(error)
    return failure.path if failure is not None and failure.full_disk else None


def run_time_failure(error: BaseException) -> str | None:
    """One line for a file the command could not write or read at run time (`file_failure`):
    "PATH: Permission denied"; None when `error` is something else."""
    failure = file_failure(error)
    return None if failure is None else failure.line()


def wait_for_file(path: str, timeout: float) -> None:
    """Waits until another process (the chief) has written `path`."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.2)

"""Reading a TSV file into memory without TensorFlow: `records.parse_tsv_lines`' line rules in
Python, so that a test set evaluates where only JAX is installed (tests check that both give the
same pairs and the same bad lines).

A line is bad if it is not valid UTF-8, is blank, has no TAB or more than one, or has an empty
side after stripping ASCII whitespace (TensorFlow's `strings.strip`). A BOM on line 1 and a CR
before the newline are accepted. Plain files, or gzip when named *.gz; `check_file` first.
"""

from __future__ import annotations

import gzip
import os
import zlib

from tfformer.data.errors import DataError

BOM = "\ufeff".encode("utf-8")
ASCII_SPACE = b" \t\n\v\f\r"  # what TensorFlow's strings.strip removes


def check_file(path: str) -> None:
    """A file must hold something besides whitespace, and a gzip file must be whole.

    tf.data's GZIP reader stops without an error where a truncated stream ends (as an
    interrupted download leaves it), so a cut .gz would train on part of itself, its last line
    cut mid-word. Python's gzip raises there: every .gz is decompressed once here, before the
    scan, the training stream or a dev/test read uses it.

    Raises:
        FileNotFoundError: "PATH: no such file".
        DataError: an empty file, a cut or invalid gzip file.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    compressed = path.endswith(".gz")
    text = False
    try:
        with (gzip.open if compressed else open)(path, "rb") as f:
            while chunk := f.read(1 << 20):
                text = text or bool(chunk.strip())
                if text and not compressed:  # a plain file is whole: its first text will do
                    return
    except EOFError:
        raise DataError(path, None, "truncated gzip file: the compressed stream ends before its "
                        "end marker (an interrupted download or copy?)") from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise DataError(path, None, f"not a valid gzip file ({error})") from None
    if not text:
        raise DataError(path, None, "empty file")


def parse_line(line: bytes, number: int) -> tuple[str, str, str]:
    """(source, target, reason) of one line without its newline, reason "" when it is good."""
    if line.endswith(b"\r"):  # tf.data's TextLineDataset drops a CR before the newline
        line = line[:-1]
    if number == 1 and line.startswith(BOM):
        line = line[len(BOM):]
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "", "", "invalid UTF-8"
    if not line.strip(ASCII_SPACE):
        return "", "", "empty line"
    tabs = line.count(b"\t")
    if tabs == 0:
        return "", "", "no TAB separator"
    if tabs > 1:
        return "", "", f"{tabs} TAB separators, expected exactly 1"
    source, target = (side.strip(ASCII_SPACE.decode()) for side in text.split("\t"))
    if not source and not target:
        return "", "", "empty source and target sides"
    if not source or not target:
        return "", "", "empty source side" if not source else "empty target side"
    return source, target, ""


def read_pairs(path: str, *, skip_bad_lines: bool = False
               ) -> tuple[list[tuple[str, str]], list[tuple[int, str]]]:
    """(pairs, skipped): the good lines' (source, target) and each bad line's (number, reason).

    Raises:
        FileNotFoundError: no such file.
        DataError: an empty or cut file, a file with no good line, and the first bad line
            unless `skip_bad_lines`.
    """
    check_file(path)
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    pairs, skipped = [], []
    for number, line in enumerate(lines, start=1):
        source, target, reason = parse_line(line, number)
        if not reason:
            pairs.append((source, target))
        elif skip_bad_lines:
            skipped.append((number, reason))
        else:
            raise DataError(path, number, reason)
    if not pairs:
        raise DataError(path, None, f"no valid line ({len(skipped)} bad lines skipped)")
    return pairs, skipped

"""`DataError`: bad input data, named by file and line (no TensorFlow here, so that every
reader, and the programs that report it, can raise and catch it)."""

from __future__ import annotations

# A bad line found inside the tf.data graph fails it with MARK + "FILE:LINE: reason" + END.
DATA_ERROR_MARK = "tfformer data error: "
DATA_ERROR_END = " (end of tfformer data error)"


class DataError(ValueError):
    """Bad input data. The message starts with "FILE:LINE: " when a line is to blame.

    Attributes:
        path: the file (or "tfds:NAME[split]") at fault.
        line: the 1-based line (or example) number, or None for the whole file.
        reason: what is wrong, without the location.
    """

    def __init__(self, path: str, line: int | None, reason: str):
        self.path, self.line, self.reason = path, line, reason
        super().__init__(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")

    @classmethod
    def from_graph_error(cls, error: Exception) -> "DataError | None":
        """The DataError a tf.data assertion raised for a bad line (`stop_at_bad_records`), or
        None if `error` is something else."""
        message = str(getattr(error, "message", error))
        start = message.find(DATA_ERROR_MARK)
        if start < 0:
            return None
        located = message[start + len(DATA_ERROR_MARK):].split(DATA_ERROR_END)[0]
        path, line, reason = _split_location(located)
        return cls(path, line, reason)


def _split_location(located: str) -> tuple[str, int | None, str]:
    # "PATH:LINE: REASON", where PATH may itself hold colons.
    head, sep, reason = located.partition(": ")
    path, _, line = head.rpartition(":")
    if sep and line.isdigit():
        return path, int(line), reason
    return located, None, ""

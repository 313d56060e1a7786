"""TensorFlow Datasets translation sets (the optional `tensorflow-datasets` package, imported only
when one is read): streamed by `tfds_records`, read into memory by `read_tfds`."""

from __future__ import annotations

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from tfformer.data.records import ParallelText, batch_records, collect, valid_utf8

TFDS_DEV_SPLIT = "validation"  # newstest2013 for wmt14_translate


def tfds_records(name: str, split: str, data_dir: str | None = None) -> tf.data.Dataset:
    """A TensorFlow Datasets translation split as records, one element per example (line =
    1-based example number). The source is the first supervised key: ``wmt14_translate/de-en``
    gives (de, en). Invalid UTF-8 is marked here; `batch_records` checks the rest.

    Raises:
        ImportError: if tensorflow-datasets is not installed.
    """
    try:
        import tensorflow_datasets as tfds  # lazy: a large optional dependency
    except ImportError:
        raise ImportError(
            f"reading tfds:{name} needs TensorFlow Datasets: pip install tensorflow-datasets"
        ) from None
    origin = f"tfds:{name}[{split}]"
    dataset = tfds.load(name, split=split, as_supervised=True, data_dir=data_dir)

    @do_not_convert
    def record(number, pair):
        source, target = pair
        valid = valid_utf8(source) & valid_utf8(target)
        return {"origin": origin, "line": number, "source": source, "target": target,
                "reason": tf.where(valid, "", "invalid UTF-8")}

    return dataset.enumerate(start=1).map(record)


def read_tfds(name: str, split: str = "train", *, skip_bad_lines: bool = False,
              data_dir: str | None = None) -> ParallelText:
    """Reads a TensorFlow Datasets translation split into memory (see `tfds_records`)."""
    return collect(batch_records(tfds_records(name, split, data_dir)),
                    f"tfds:{name}[{split}]", skip_bad_lines)

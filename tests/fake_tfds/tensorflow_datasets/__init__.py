"""A stand-in for TensorFlow Datasets, put on PYTHONPATH by tests/test_docs.py so that the
READMEs' `tfds:` commands run without a download.

It implements what `tfformer.data.tfds.tfds_records` calls: `load(name, split,
as_supervised=True, data_dir=None)` returns a `tf.data.Dataset` of (source, target) string
pairs. Every translation data set is a few pairs of the built-in Spanish->English corpus
(validation: its dev split).
Each call is appended as "NAME SPLIT" to the file named by $FAKE_TFDS_LOG, if set, so that a
test can tell the fake was used.
"""

import os

import tensorflow as tf

from tfformer.data.builtin import builtin_pairs

SIZES = {"train": 48, "validation": 6, "test": 6}


def load(name, split, as_supervised=False, data_dir=None, **kwargs):
    if not as_supervised:
        raise NotImplementedError("the fake tensorflow_datasets implements as_supervised=True")
    if split not in SIZES:
        raise ValueError(f"fake tensorflow_datasets: unknown split {split!r} of {name}")
    log = os.environ.get("FAKE_TFDS_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{name} {split}\n")
    pairs = builtin_pairs("dev" if split == "validation" else split, SIZES[split])
    return tf.data.Dataset.from_tensor_slices(
        ([source for source, _ in pairs], [target for _, target in pairs]))

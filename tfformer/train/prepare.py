"""`tfformer-prepare`: a corpus read once into a prepared store (`tfformer.data.store`).

The corpus is opened and scanned as a new run does (`tfformer.train.inputs.prepare`: every line
checked, with file and line on the first bad one; the vocabulary learned from a bounded sample or
given; the dev set held out or read), then its training pairs are read a second time, in file
order, encoded with SentencePiece in Python and written to the store, the dev pairs after them.
The manifest is written last: a preparation killed on the way leaves no store that opens.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time

from tfformer.data import store as stores
from tfformer.data.tokenizer import Tokenizer
from tfformer.train import inputs
from tfformer.utils.run_dir import RunDir, read_data_stats

logger = logging.getLogger(__name__)

ENCODE_BATCH = 4096  # pairs read and encoded together


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What `prepare_store` wrote: the store's directory and its manifest."""

    path: str
    manifest: dict


def prepare_store(spec: str, out: str | os.PathLike, *, vocab_size: int = 8000,
                  vocab_sample: int = 1_000_000, tokenizer: str | None = None, seed: int = 0,
                  skip_bad_lines: bool = False) -> Prepared:
    """Prepares the corpus of the data spec `spec` into the directory `out`.

    Args:
        spec: a data spec (`tfformer.data.sources`: builtin, tsv:TRAIN[,DEV], tfds:NAME).
        out: the store's directory (created; a complete store there is refused).
        vocab_size, vocab_sample: the vocabulary learned when `tokenizer` is not given.
        tokenizer: a SentencePiece model file to use instead (its reserved ids must be
            tfformer's).
        seed: the held-out dev set's and the vocabulary sample's seed.
        skip_bad_lines: skip (and count) bad lines instead of failing on the first.

    Raises:
        DataError: a bad line (file and line), a missing or empty file.
        FileExistsError: `out` holds a complete store already.
        ValueError: a malformed spec, or a tokenizer with other reserved ids.
    """
    out = os.fspath(out)
    if stores.is_store_spec(spec):
        raise ValueError(f"data spec {spec!r} is prepared already")
    if os.path.exists(os.path.join(out, stores.MANIFEST)):
        raise FileExistsError(f"{out} holds a prepared corpus already: give another directory, "
                              "or remove it to prepare again")
    started = time.monotonic()
    os.makedirs(out, exist_ok=True)
    directory = RunDir(out)  # the scan's files have the names a run directory gives them
    if tokenizer is not None:
        Tokenizer.from_file(tokenizer)  # refuses other reserved ids before any reading
        shutil.copyfile(tokenizer, directory.tokenizer)
    data = inputs.prepare(directory, chief=True, spec=spec, skip_bad_lines=skip_bad_lines,
                          seed=seed, vocab_size=vocab_size, vocab_sample=vocab_sample)
    scan = read_data_stats(directory)
    # The corpus readers are tf.data's: the lines are checked as a run's stream checks them.
    chunks = ([[s.decode("utf-8") for s in sources], [t.decode("utf-8") for t in targets]]
              for sources, targets in data.corpus.train_pairs(
                  skip_bad_lines=skip_bad_lines).batch(ENCODE_BATCH).as_numpy_iterator())
    manifest = stores.write_store(out, data.tokenizer.pieces, chunks, data.dev.pairs, {
        "spec": data.corpus.spec, "files": scan.get("files"), "seed": seed,
        "bad_lines_skipped": scan.get("bad_lines", 0), "held_out": scan.get("held_out", 0),
        "dev_from": "held out" if data.corpus.holds_out_dev else data.dev.path})
    counts = manifest["splits"]
    logger.info("prepared %s into %s: %d training pairs (%d source, %d target pieces), %d dev "
                "pairs, %d ids, in %.1f s", data.corpus.spec, out, counts["train"]["pairs"],
                counts["train"]["source_tokens"], counts["train"]["target_tokens"],
                counts["dev"]["pairs"], manifest["vocab_size"], time.monotonic() - started)
    return Prepared(out, manifest)

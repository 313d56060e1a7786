"""A prepared corpus: the token ids of both sides, memory-mapped, with its vocabulary and a
manifest (no TensorFlow here).

`tfformer-prepare` (`tfformer.train.prepare`) reads a corpus once, checks every line, learns or
takes the vocabulary, holds out the dev set and writes the store; training then reads batches
from it with `tfformer.data.loader`, on any backend, without tokenizing again (fairseq's
`fairseq-preprocess` and binarized data are this pattern).

A store directory holds:

* ``tokenizer.model``: the SentencePiece model the ids are of;
* ``dev.tsv``: the dev pairs as text (``source<TAB>target``), what dev BLEU scores against;
* for each split (``train``, ``dev``) and side (``source``, ``target``): ``SPLIT.SIDE.ids``,
  every sentence's piece ids one after the other (no BOS or EOS: the loader adds them), and
  ``SPLIT.SIDE.offsets``, int64 [pairs + 1], where sentence i is ids[offsets[i]:offsets[i+1]];
* ``manifest.json``, written last (its presence marks a complete store): the format version,
  the ids' dtype, the counts and token totals of each split, the data spec and the source files'
  signatures, and what the scan found.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable

import numpy as np

from tfformer.utils.files import atomic_write, atomic_write_text

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.model"
DEV_TEXT = "dev.tsv"
SPLITS = ("train", "dev")
SIDES = ("source", "target")
PREFIX = "prepared:"  # the data spec of a store: prepared:DIR


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 ids where the vocabulary allows (half the disk and page cache), else int32."""
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32)


def is_store_spec(spec: str) -> bool:
    return spec.startswith(PREFIX)


def store_path(spec: str) -> str:
    """DIR of the data spec prepared:DIR."""
    path = spec[len(PREFIX):]
    if not path:
        raise ValueError(f"data spec {spec!r}: expected prepared:DIR, DIR a tfformer-prepare "
                         "output")
    return path


class SplitWriter:
    """Appends encoded pairs of one split to its files, in bounded memory (the offsets only)."""

    def __init__(self, directory: str, split: str, dtype: np.dtype):
        self.directory, self.split, self.dtype = directory, split, dtype
        self._files = {side: open(self._path(side, "ids") + ".tmp", "wb") for side in SIDES}
        self._offsets = {side: [np.zeros([1], np.int64)] for side in SIDES}
        self._ends = {side: 0 for side in SIDES}

    def _path(self, side: str, kind: str) -> str:
        return os.path.join(self.directory, f"{self.split}.{side}.{kind}")

    def add(self, sources: list[list[int]], targets: list[list[int]]) -> None:
        """Adds pairs: the piece ids of each source and target sentence."""
        for side, sentences in zip(SIDES, (sources, targets)):
            lengths = np.fromiter((len(s) for s in sentences), np.int64, len(sentences))
            flat = np.fromiter((i for s in sentences for i in s), self.dtype, int(lengths.sum()))
            self._files[side].write(flat.tobytes())
            self._offsets[side].append(self._ends[side] + np.cumsum(lengths))
            self._ends[side] += int(lengths.sum())

    def close(self) -> dict:
        """Flushes, moves the files in place and returns the split's counts for the manifest."""
        counts = {}
        for side in SIDES:
            self._files[side].flush()
            os.fsync(self._files[side].fileno())
            self._files[side].close()
            os.replace(self._path(side, "ids") + ".tmp", self._path(side, "ids"))
            offsets = np.concatenate(self._offsets[side])
            atomic_write(self._path(side, "offsets"), offsets.tofile)
            counts["pairs"] = len(offsets) - 1
            counts[f"{side}_tokens"] = int(offsets[-1])
        return counts


@dataclasses.dataclass(frozen=True)
class Split:
    """One split's ids, memory-mapped: `lengths(side)` and `sentence(side, i)` read them."""

    name: str
    ids: dict[str, np.ndarray]
    offsets: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.offsets["source"]) - 1

    def lengths(self, side: str) -> np.ndarray:
        """Pieces of every sentence of `side` (no BOS or EOS), int64 [pairs]."""
        return np.diff(self.offsets[side])

    def sentence(self, side: str, index: int) -> np.ndarray:
        offsets = self.offsets[side]
        return self.ids[side][offsets[index]:offsets[index + 1]]


@dataclasses.dataclass(frozen=True)
class Store:
    """An opened store (`Store.open`)."""

    path: str
    manifest: dict
    train: Split
    dev: Split

    @property
    def tokenizer_path(self) -> str:
        return os.path.join(self.path, TOKENIZER)

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    def dev_pairs(self) -> list[tuple[str, str]]:
        """The dev pairs as text, in the order of the dev split's ids."""
        with open(os.path.join(self.path, DEV_TEXT), encoding="utf-8") as f:
            return [tuple(line.rstrip("\n").split("\t", 1)) for line in f]

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Store":
        """Opens a store that `tfformer-prepare` completed.

        Raises:
            FileNotFoundError: no store there (or one whose preparation did not finish).
            ValueError: a store of another format version, or files that disagree with the
                manifest.
        """
        path = os.fspath(path)
        manifest_path = os.path.join(path, MANIFEST)
        if not os.path.exists(manifest_path):
            raise FileNotFoundError(f"{path}: no {MANIFEST}: not a prepared corpus, or its "
                                    "preparation did not finish (run tfformer-prepare again)")
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{manifest_path}: format_version {manifest.get('format_version')} "
                             f"is not {FORMAT_VERSION}: prepare the corpus again with this "
                             "version of tfformer")
        dtype = np.dtype(manifest["ids_dtype"])
        splits = {}
        for split in SPLITS:
            ids, offsets = {}, {}
            for side in SIDES:
                stem = os.path.join(path, f"{split}.{side}")
                offsets[side] = np.fromfile(stem + ".offsets", np.int64)
                size = os.path.getsize(stem + ".ids") // dtype.itemsize
                # An empty memory map cannot be made; an empty array reads the same.
                ids[side] = (np.memmap(stem + ".ids", dtype, mode="r") if size
                             else np.zeros([0], dtype))
                counts = manifest["splits"][split]
                if len(offsets[side]) != counts["pairs"] + 1 or offsets[side][-1] != size \
                        or size != counts[f"{side}_tokens"]:
                    raise ValueError(f"{stem}.ids/.offsets do not match {manifest_path} "
                                     f"({counts}): the store is damaged; prepare it again")
            splits[split] = Split(split, ids, offsets)
        return cls(path, manifest, splits["train"], splits["dev"])


def write_store(directory: str, pieces, train_chunks: Iterable[tuple[list[str], list[str]]],
                dev_pairs: list[tuple[str, str]], about: dict) -> dict:
    """Writes a store: the vocabulary of `pieces` (a `tfformer.data.pieces.SentencePieces`),
    the training pairs as they come, in chunks of (sources, targets) texts, encoded, then the
    dev pairs, and last the manifest (`about` plus the counts). Returns the manifest.
    """
    dtype = ids_dtype(pieces.vocab_size)
    os.makedirs(directory, exist_ok=True)

    def write_tokenizer(temporary: str) -> None:
        with open(temporary, "wb") as f:
            f.write(pieces.model_proto)

    atomic_write(os.path.join(directory, TOKENIZER), write_tokenizer)
    counts = {}
    train = SplitWriter(directory, "train", dtype)
    for sources, targets in train_chunks:
        train.add(pieces.encode(sources), pieces.encode(targets))
    counts["train"] = train.close()
    dev = SplitWriter(directory, "dev", dtype)
    dev.add(pieces.encode([s for s, _ in dev_pairs]), pieces.encode([t for _, t in dev_pairs]))
    counts["dev"] = dev.close()
    atomic_write_text(os.path.join(directory, DEV_TEXT), "".join(
        f"{source}\t{target}\n" for source, target in dev_pairs))
    manifest = {"format_version": FORMAT_VERSION, **about, "vocab_size": pieces.vocab_size,
                "ids_dtype": dtype.name, "splits": counts}
    # Last: the store is complete once its manifest exists.
    atomic_write_text(os.path.join(directory, MANIFEST), json.dumps(manifest, indent=2))
    return manifest

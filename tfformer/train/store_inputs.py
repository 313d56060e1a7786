"""What a run trains on when its data is a prepared store (`--data prepared:DIR`), with no
TensorFlow: the store's vocabulary and dev set (`prepare`) and the loader's batches
(`assemble`), in the shapes `tfformer.train.inputs` gives for a text corpus.

The run directory gets the store's tokenizer.model (the export and translation read it there)
and a data.json naming the store. Training order is the loader's (`tfformer.data.loader`):
batch n of the run is found without reading the n before it, so a resumed run starts at once.
Packed epochs differ in size; the sizes planned so far are kept in data.json, so a resume need
not plan the epochs before it again.
"""

from __future__ import annotations

import dataclasses
import filecmp
import importlib.util
import logging
import os
import threading
from typing import Any, Callable

from tfformer.data.buckets import DEFAULT_BUCKET_GROWTH
from tfformer.data.loader import BatchStats, Loader
from tfformer.data.store import DEV_TEXT, Store, store_path
from tfformer.utils.files import atomic_copy, wait_for_file
from tfformer.utils.run_dir import RunDir, read_data_stats, write_data_stats

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DevPairs:
    """The dev pairs as text (what dev BLEU scores against) and where they came from."""

    pairs: list[tuple[str, str]]
    path: str

    def __len__(self) -> int:
        return len(self.pairs)


@dataclasses.dataclass
class StoreData:
    """A run's prepared store, vocabulary and dev set.

    Attributes:
        tokenizer: the `Tokenizer` (tf-text, for the graph search) where TensorFlow is
            installed, else the store's `SentencePieces`.
    """

    store: Store
    tokenizer: Any
    dev: DevPairs


def load_tokenizer(path: str):
    """The run's tokenizer: tf-text's where TensorFlow is installed, else SentencePiece's."""
    if importlib.util.find_spec("tensorflow") is not None:
        from tfformer.data.tokenizer import Tokenizer

        return Tokenizer.from_file(path)
    from tfformer.data.pieces import SentencePieces

    return SentencePieces.from_file(path)


def prepare(run: RunDir, *, chief: bool, spec: str) -> StoreData:
    """Opens the store of `spec` (prepared:DIR) and gives the run its vocabulary: the chief
    copies the store's tokenizer.model into the run directory, other workers wait for it.

    Raises:
        FileNotFoundError: no complete store there.
        ValueError: the run directory was started on other data, or with another vocabulary.
    """
    store = Store.open(store_path(spec))
    if os.path.exists(run.vocabulary):
        raise ValueError(f"{run.path} has an imported model's vocabulary ({run.vocabulary}, "
                         "two SentencePiece models); a prepared store holds one "
                         "tokenizer.model: train it on text data (tsv: or tfds:) instead")
    stats = read_data_stats(run)
    started_on = stats.get("spec")
    if started_on is not None and started_on != spec and os.path.exists(run.tokenizer):
        raise ValueError(f"{run.path} is a run on data {started_on!r}, not {spec!r}: "
                         "give a new run directory, or the same data to resume it")
    if not chief:
        wait_for_file(run.data_stats, timeout=600)
        wait_for_file(run.tokenizer, timeout=600)
    elif "spec" not in stats and os.path.exists(run.tokenizer):  # a fine-tuned run's
        check_same_tokenizer(run, store)
        write_data_stats(run, {**stats, "spec": spec, "store": store.manifest})
    elif not os.path.exists(run.tokenizer):
        os.makedirs(run.path, exist_ok=True)
        write_data_stats(run, {**stats, "spec": spec, "store": store.manifest})
        atomic_copy(store.tokenizer_path, run.tokenizer)
    else:
        check_same_tokenizer(run, store)
    dev = DevPairs(store.dev_pairs(), os.path.join(store.path, DEV_TEXT))
    logger.info("data: %s: %d training pairs, %d dev pairs (prepared %s)", spec,
                len(store.train), len(dev), store.manifest.get("spec"))
    return StoreData(store, load_tokenizer(run.tokenizer), dev)


def check_same_tokenizer(run: RunDir, store: Store) -> None:
    """Raises ValueError unless the run's tokenizer.model is the store's, byte for byte."""
    if filecmp.cmp(run.tokenizer, store.tokenizer_path, shallow=False):
        return
    if os.path.exists(run.init_from):
        raise ValueError(f"{store.tokenizer_path} differs from the vocabulary of the run this "
                         f"one starts from ({run.tokenizer}): prepare the store with "
                         f"tfformer-prepare --tokenizer {run.tokenizer}")
    raise ValueError(f"{run.tokenizer} differs from {store.tokenizer_path}: the store was "
                     "prepared again with another vocabulary since this run started; give "
                     "a new run directory")


class Counters:
    """The stream's counts, as `tfformer.train.inputs.Counters` reads them: a store has no bad
    lines left; the pairs dropped as too long are counted once per epoch begun."""

    def __init__(self):
        self._lock = threading.Lock()
        self.dropped = 0

    def add_dropped(self, count: int) -> None:
        with self._lock:
            self.dropped += count

    def read(self) -> dict[str, int]:
        with self._lock:
            return {"skipped": 0, "dropped": self.dropped}


@dataclasses.dataclass
class StoreBatches:
    """What one run trains and validates on, as `tfformer.train.inputs.RunBatches` has it."""

    train: Callable[[int], Any]
    dev: Any
    batches_per_pass: Callable[[], int]
    counters: Counters
    stats: BatchStats


def assemble(run: RunDir, data: StoreData, *, batch_tokens: int, max_length: int, seed: int,
             batch_multiple: int, bucket_growth: float = DEFAULT_BUCKET_GROWTH,
             pack_length: int = 0, num_workers: int = 1, worker_index: int = 0,
             write_cache: bool = True, fixed_rows: bool = True) -> StoreBatches:
    """The loader's batches for one worker of a run (arguments as `tfformer.train.inputs.assemble`);
    `write_cache`: keep the packed epochs' sizes in RUN/data.json (the chief does)."""
    import keras

    counters, stats = Counters(), BatchStats()
    shapes = dict(batch_tokens=batch_tokens, max_length=max_length,
                  batch_multiple=batch_multiple, bucket_growth=bucket_growth,
                  pack_length=pack_length)
    key = ",".join(f"{name}={value}" for name, value in shapes.items()) + \
        f",seed={seed},shard={worker_index}/{num_workers}"
    known = read_data_stats(run).get("epoch_sizes", {}).get(key, [])

    def keep_sizes(sizes: list[int]) -> None:
        if write_cache:
            stats_now = read_data_stats(run)
            write_data_stats(run, {**stats_now, "epoch_sizes": {
                **stats_now.get("epoch_sizes", {}), key: sizes}})

    # Only packed epochs differ in size (a bucketed loader counts its epochs without a plan).
    loader = Loader(data.store.train, **shapes, seed=seed, num_shards=num_workers,
                    shard_index=worker_index, fixed_rows=True, known_epoch_sizes=known,
                    stats=stats, on_new_epoch=keep_sizes if pack_length else None,
                    on_epoch_begun=counters.add_dropped)
    if num_workers > 1:
        logger.info("train: worker %d reads every %d-th pair of the store from pair %d",
                    worker_index, num_workers, worker_index)
    dev_loader = Loader(data.store.dev, **shapes, shuffle=False, fixed_rows=fixed_rows)
    if dev_loader.num_dropped:
        logger.info("dev: %d pairs dropped as longer than %d tokens", dev_loader.num_dropped,
                    dev_loader.limit)
    dev_batches = list(dev_loader.epoch(0))

    class Dev(keras.utils.PyDataset):
        def __len__(self):
            return len(dev_batches)

        def __getitem__(self, index):
            return dev_batches[index]

    return StoreBatches(train=loader.batches, dev=Dev(), batches_per_pass=lambda:
                        loader.epoch_size(0), counters=counters, stats=stats)

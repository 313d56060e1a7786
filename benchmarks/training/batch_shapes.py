"""Batch shapes, padding and XLA: the bucket grid on a corpus, and `--jit` against plain TF
training (and JAX) on the same corpus, in one run. JSON on stdout.

    .venv/bin/python benchmarks/training/batch_shapes.py > benchmarks/results/batch_shapes.json
    # quick:
    .venv/bin/python benchmarks/training/batch_shapes.py --data builtin --first 20 --more 10

1. Grid: one pass over the training pairs for each bucket growth: buckets, distinct batch shapes,
   the share of padding, and the padding the same batches would have if each were padded only
   to its own longest pair (what the pipeline did before the grid); and the same for pairs
   packed into rows of `--pack-length` tokens (`--pack-length` of tfformer-train).
2. Training: the tiny preset in child processes (fresh XLA caches unless `--xla-cache`), one per
   contender, each on the batches its own settings make (plain TF: the default grid; `--jit`
   and JAX: the compiled grid; `_packed`: packed rows, one shape). It times the first `--first`
   updates, compilations included, and the target tokens per second of the `--more` updates
   after them; it also reports the shapes the updates saw and, on JAX, the train step's
   compilations.
   Targets (issue 19): compilations <= buckets, padding <= 15% on the Bible corpus, --jit no
   slower per target token than plain after warm-up, and its first updates within 1.2x of
   plain's time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIBLE = os.path.join(ROOT, "..", "shared", "data", "bible-es-en")
CONTENDERS = {  # name -> (backend, jit, packed)
    "tensorflow": ("tensorflow", False, False),
    "tensorflow_jit": ("tensorflow", True, False),
    "tensorflow_jit_packed": ("tensorflow", True, True),
    "jax": ("jax", True, False),
    "jax_packed": ("jax", True, True),
}


def training_pairs(spec: str, limit: int | None) -> list[tuple[str, str]]:
    from tfformer.data.sources import open_corpus

    corpus = open_corpus(spec)
    pairs = []
    for source, target in corpus.train_pairs().as_numpy_iterator():
        pairs.append((source.decode(), target.decode()))
        if limit and len(pairs) >= limit:
            break
    return pairs


def packed_report(pairs, tokenizer, pack_length: int, batch_tokens: int) -> dict:
    """About one pass of the (endless) training stream packed into rows: shapes and padding."""
    import tensorflow as tf

    from tfformer.data.batching import BatchStats, make_stream

    stats = BatchStats()
    strings = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    dropped = tf.Variable(0, dtype=tf.int64)
    one_pass = int(make_stream(strings, tokenizer, batch_tokens=batch_tokens,
                               max_length=pack_length, pack_length=pack_length,
                               dropped=dropped).reduce(tf.constant(0, tf.int64),
                                                       lambda n, _: n + 1))
    for _ in make_stream(strings.repeat(), tokenizer, batch_tokens=batch_tokens,
                         max_length=pack_length, pack_length=pack_length, stats=stats,
                         seed=1).take(one_pass):
        pass
    found = stats.read()
    return {"pack_length": pack_length, "batches": found["batches"],
            "distinct_shapes": len(found["shapes"]), "padding": round(found["padding"], 4),
            "shapes": found["shapes"], "dropped_pairs": int(dropped.numpy())}


def grid_report(pairs, tokenizer, growth: float, batch_tokens: int, max_length: int) -> dict:
    """About one pass of the (endless) training stream on this grid: shapes and padding.

    Counted here from the batches taken, not with `BatchStats`: that also counts the batches
    prefetching reads ahead, which the tight count below never sees.
    """
    import collections

    import tensorflow as tf

    from tfformer.data.batching import make_stream
    from tfformer.data.buckets import bucket_lengths
    from tfformer.special_tokens import PAD_ID

    strings = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    one_pass = int(make_stream(strings, tokenizer, batch_tokens=batch_tokens,
                               max_length=max_length, bucket_growth=growth).reduce(
                                   tf.constant(0, tf.int64), lambda n, _: n + 1))
    # Training streams repeat: no bucket ends a pass with a batch filled up with PAD rows.
    batches = make_stream(strings.repeat(), tokenizer, batch_tokens=batch_tokens,
                          max_length=max_length, bucket_growth=growth, seed=1).take(one_pass)
    shapes = collections.Counter()
    tokens = slots = 0  # real tokens; positions of the batches as made (to the bucket's length)
    tight_slots = 0  # positions if each side of each batch were padded only to its longest row
    for (source, target_in), _ in batches.as_numpy_iterator():
        shapes[f"{target_in.shape[0]}x{target_in.shape[1]}"] += 1
        real = source[:, 0] != PAD_ID
        for side in (source, target_in):
            lengths = (side != PAD_ID).sum(axis=1)
            tokens += int(lengths.sum())
            slots += side.size
            tight_slots += int(real.sum()) * int(lengths[real].max())
    return {"bucket_growth": growth, "buckets": len(bucket_lengths(max_length, growth=growth)),
            "batches": sum(shapes.values()), "distinct_shapes": len(shapes),
            "padding": round(1 - tokens / slots, 4),
            "padding_if_padded_to_each_batch_longest": round(1 - tokens / tight_slots, 4),
            "shapes": dict(shapes.most_common()), "mean_rows": round(sum(
                int(k.split("x")[0]) * n for k, n in shapes.items()) / sum(shapes.values()), 1)}


def child(args) -> int:
    """One contender: fit `first + more` updates on its own batches; JSON on stdout."""
    backend, jit, packed = CONTENDERS[args.child]
    os.environ["KERAS_BACKEND"] = backend
    import keras
    import tensorflow as tf

    from tfformer.config import get_preset
    from tfformer.data.batching import BatchStats, make_stream
    from tfformer.data.buckets import default_growth
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.model.compile_transformer import compile_transformer
    from tfformer.model.transformer import Transformer
    from tfformer.special_tokens import PAD_ID
    from tfformer.train import compilations

    keras.utils.set_random_seed(0)
    tokenizer = Tokenizer.from_file(args.tokenizer)
    with open(args.pairs, encoding="utf-8") as f:
        pairs = [tuple(line.rstrip("\n").split("\t")) for line in f]
    growth = default_growth(compiled=jit)
    strings = tf.data.Dataset.from_tensor_slices(
        ([s for s, _ in pairs], [t for _, t in pairs])).repeat()
    stats = BatchStats()
    stream = make_stream(strings, tokenizer, batch_tokens=args.batch_tokens, max_length=256,
                         bucket_growth=growth, stats=stats, seed=2,
                         pack_length=args.pack_length if packed else 0)
    # The batches are made before the clock starts, so that only training is timed.
    batches = list(stream.take(args.first + args.more).as_numpy_iterator())
    target_tokens = [int((batch[1] != PAD_ID).sum()) for batch in batches]

    def generate():
        yield from batches

    spec = tf.TensorSpec([None, None], tf.int32)
    inputs = (spec,) * len(batches[0][0])  # ids, or ids and segment ids
    data = tf.data.Dataset.from_generator(generate, output_signature=(inputs, spec))
    model = Transformer(get_preset("tiny", vocab_size=tokenizer.vocab_size))
    model.build()
    compile_transformer(model, jit_compile=jit if backend == "tensorflow" else "auto")
    counting = compilations.start_counting(backend)
    ends = []
    timer = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: ends.append(time.perf_counter()))
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=len(batches), verbose=0, callbacks=[timer])
    first_seconds = ends[args.first - 1] - start
    more_seconds = ends[-1] - ends[args.first - 1]
    shapes = {f"{b[1].shape[0]}x{b[1].shape[1]}" for b in batches}
    report = {
        "backend": backend, "jit": jit,
        **({"pack_length": args.pack_length} if packed else {"bucket_growth": growth}),
        "first_updates": args.first, "first_seconds": round(first_seconds, 2),
        "more_updates": args.more, "more_seconds": round(more_seconds, 2),
        "more_target_tokens_per_second": round(sum(target_tokens[args.first:]) / more_seconds, 1),
        "first_target_tokens": sum(target_tokens[:args.first]),
        "distinct_shapes": len(shapes),
        "train_step_compilations": (compilations.step_compilations()["train_step"]
                                    if counting else None),
        "loss": round(float(model.evaluate(data.take(1), verbose=0)[0]), 3),
    }
    print(json.dumps(report))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None,
                        help="a --data spec (default: the shared Bible corpus if present, "
                             "else builtin)")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--growths", default="1.1,1.25")
    parser.add_argument("--first", type=int, default=200)
    parser.add_argument("--more", type=int, default=200)
    parser.add_argument("--pack-length", type=int, default=128,
                        help="tokens per row of the packed contenders")
    parser.add_argument("--limit", type=int, default=None, help="use at most this many pairs")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--xla-cache", action="store_true",
                        help="let JAX's children load programs from JAX_COMPILATION_CACHE_DIR "
                             "(faster; their first updates are then not timed from scratch)")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    from tfformer.data.tokenizer import Tokenizer
    from tfformer.utils.cpu import matmul_flags

    spec = args.data or (
        "tsv:{0}/train.tsv,{0}/dev.tsv".format(os.path.relpath(BIBLE)) if os.path.isdir(BIBLE)
        else "builtin")
    pairs = training_pairs(spec, args.limit)
    tokenizer = Tokenizer.train([s for pair in pairs for s in pair], args.vocab_size, seed=0)
    report = {"data": spec, "pairs": len(pairs), "vocab_size": tokenizer.vocab_size,
              "batch_tokens": args.batch_tokens, "max_length": 256,
              "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
              "cpu_flags": matmul_flags(), "xla_cache": args.xla_cache,
              "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
              "grid": [grid_report(pairs, tokenizer, float(g), args.batch_tokens, 256)
                       for g in args.growths.split(",")],
              "packed": packed_report(pairs, tokenizer, args.pack_length, args.batch_tokens)}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(os.path.join(tmp, "sp.model"))
        with open(os.path.join(tmp, "pairs.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{s}\t{t}\n" for s, t in pairs)
        training = {}
        for name in args.contenders.split(","):
            result = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", name,
                 "--tokenizer", os.path.join(tmp, "sp.model"),
                 "--pairs", os.path.join(tmp, "pairs.tsv"), "--first", str(args.first),
                 "--more", str(args.more), "--batch-tokens", str(args.batch_tokens),
                 "--pack-length", str(args.pack_length)],
                capture_output=True, text=True,
                env=os.environ if args.xla_cache else {**os.environ,
                                                       "JAX_COMPILATION_CACHE_DIR": ""})
            if result.returncode:
                raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
            training[name] = json.loads(result.stdout.strip().splitlines()[-1])
    report["training"] = training
    for name in ("tensorflow_jit", "tensorflow_jit_packed"):
        if "tensorflow" in training and name in training:
            plain, jit = training["tensorflow"], training[name]
            report[name.replace("tensorflow_jit", "jit") + "_vs_plain"] = {
                "first_updates_time": round(jit["first_seconds"] / plain["first_seconds"], 3),
                "target_tokens_per_second_after": round(
                    jit["more_target_tokens_per_second"]
                    / plain["more_target_tokens_per_second"], 3)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

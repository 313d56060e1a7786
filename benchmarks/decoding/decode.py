"""Decoding latency: greedy vs beam 4, batch 1 vs 32, tiny vs base, cached vs full recomputation,
in process vs through gRPC (the local TF Serving stand-in, official stub), and our SavedModel
(fp32, bf16) against CTranslate2 (fp32, int8) on the same weights. JSON on stdout.

    .venv/bin/python benchmarks/decoding/decode.py > decode.json          # everything (~30 minutes)
    .venv/bin/python benchmarks/decoding/decode.py --presets tiny --reps 3
    # ~10 minutes:
    .venv/bin/python benchmarks/decoding/decode.py --formats only > decode_formats.json

The "formats" rows time, for each search (greedy; beam 4 with length penalty 0.6) and batch,
`tfformer-export`'s SavedModel in float32 and with `--precision bf16`, and
`tfformer-export --format ctranslate2`'s model with float32 and int8 weights (CTranslate2 with
`--threads` intra-op threads, each model in a process of its own: `ct2_process.py`), called in
turn round after round; `over_ctranslate2_fp32` is each one's median time over CTranslate2
fp32's. Every row names the CPU's matmul flags (`cpu_flags`:
AVX2, AVX-512, AVX512_BF16, AMX) and whether TensorFlow runs oneDNN (`onednn`, and the
`TF_ENABLE_ONEDNN_OPTS` it was given): they set each format's speed. An AVX2-only CPU's
kernels, on a CPU with AVX-512:

    TF_ENABLE_ONEDNN_OPTS=0 CT2_FORCE_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
        .venv/bin/python benchmarks/decoding/decode.py --formats only > decode_formats_avx2.json

Every hypothesis is exactly 64 tokens long: the models are random with EOS's output embedding set
to zero (so EOS never wins before the length limit) and max_output_extra chosen so that the
limit is 64. The "matmul-floor" rows time only the matmuls a cached step cannot avoid (every
weight matrix read once per step, as the model multiplies it), so full / floor bounds what any
cache could reach here; at batch 1 the formats rows give that floor with float32 and bfloat16
weights, and `floor_fp32_over_bf16` is the most bf16 can gain over float32 there. The
"transport" rows time gRPC alone: a SavedModel with the same signature that
returns its input, in process vs through the local server. Targets: cached decoding >= 5x faster
than full recomputation for 64 output tokens; gRPC adds <= 2 ms per request at batch 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

OUTPUT_TOKENS = 64
# Between two formats' calls: the threads of the one timed before must be asleep. OpenMP
# threads (CTranslate2's, in its own process) and TensorFlow's Eigen pool spin a while after
# each call; a spinning pool takes the cores of the next call.
SETTLE_SECONDS = 0.3
SENTENCE = "Los tres perros rojos comen manzanas verdes debajo de la mesa."


def timed(function, reps: int, budget_seconds: float) -> dict:
    """Median of `reps` calls after one warm-up call, fewer if one call exceeds the budget."""
    start = time.perf_counter()
    function()  # trace / warm up
    first = time.perf_counter() - start
    if first > budget_seconds:  # slow enough that tracing is noise: one call is the measure
        return {"median_ms": round(1000 * first, 2), "runs": 1, "first_call_ms": None}
    times = []
    for _ in range(reps):
        if times and sum(times) > budget_seconds:
            break
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return {"median_ms": round(1000 * statistics.median(times), 2), "runs": len(times),
            "first_call_ms": round(1000 * first, 1)}


def paired(first, second, reps: int, budget_seconds: float,
           warm_up: bool = True) -> tuple[dict, dict]:
    """Times two functions alternately, so that drift in machine load hits both alike."""
    timings = paired_all({"first": first, "second": second}, reps, budget_seconds, warm_up)
    return timings["first"], timings["second"]


def paired_all(functions: dict, reps: int, budget_seconds: float,
               warm_up: bool = True, settle_seconds: float = 0.0) -> dict:
    """Times several functions in turn, round after round (after one warm-up call each), so
    that drift in machine load hits all alike: {name: {"median_ms", "runs"}}. With
    `settle_seconds`, each call waits that long first (untimed)."""
    if warm_up:
        for function in functions.values():
            function()
    times = {name: [] for name in functions}
    for _ in range(reps):
        if all(times.values()) and sum(map(sum, times.values())) > budget_seconds:
            break
        for name, function in functions.items():
            time.sleep(settle_seconds)
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: {"median_ms": round(1000 * statistics.median(t), 2), "runs": len(t)}
            for name, t in times.items()}


def transport_overhead(reps: int) -> list[dict]:
    """gRPC cost alone: a SavedModel with the Translator's signature that returns its input,
    called in process and through the local server, alternately, `reps` times each."""
    import grpc
    import tensorflow as tf

    from tfformer.serving import client, server

    class Echo(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def translate(self, inputs):
            return {"translations": inputs, "scores": tf.zeros(tf.shape(inputs), tf.float32)}

    rows = []
    with tempfile.TemporaryDirectory() as base:
        echo = Echo()
        tf.saved_model.save(echo, os.path.join(base, "echo", "1"),
                            signatures={"serving_default": echo.translate})
        signature = tf.saved_model.load(os.path.join(base, "echo", "1")).signatures[
            "serving_default"]
        with server.start_server(os.path.join(base, "echo"), "echo") as handle:
            channel = grpc.insecure_channel(handle.address)
            for batch in (1, 32):
                sentences = [SENTENCE] * batch
                local, remote = paired(
                    lambda: signature(inputs=tf.constant(sentences)),
                    lambda: client.translate(sentences, server=handle.address, model="echo",
                                             channel=channel), reps, budget_seconds=60)
                rows.append({"model": "echo", "batch": batch, "in_process_ms": local["median_ms"],
                             "grpc_ms": remote["median_ms"], "runs": local["runs"],
                             "grpc_overhead_ms": round(remote["median_ms"]
                                                       - local["median_ms"], 3)})
            channel.close()
    return rows


def matmul_floor(model, rows: int, reps: int, budget_seconds: float,
                 dtype: str = "float32", transposed: bool = False) -> dict:
    """The least any cached decoder with TensorFlow's kernels can spend on OUTPUT_TOKENS steps of
    `rows` rows here, with the weights in `dtype`: each step sends the rows through every weight
    matrix a cached step must read (per layer: self-attention Q, K, V, O; cross-attention Q, O;
    FFN W_1, W_2; then the output projection), as the model multiplies them (MatMul + BiasAdd,
    which oneDNN fuses; the output projection without a bias, by E^T [d_model, vocab] made once
    per call outside the loop, as the searches do: `SharedEmbedding.projection`), chained in a
    tf.while_loop, and does nothing else. Full recomputation over this time is the largest
    speedup a cache could give on this machine; the float32 floor over the bfloat16 one is the
    most that bf16 weights can gain over float32 with these kernels. `transposed` stores each
    kernel as [out, in] and multiplies with MatMul(transpose_b), the layout oneDNN's inner
    product reads without reordering (the model stores [in, out])."""
    import tensorflow as tf

    d_model = model.transformer_config.d_model

    def variable(value):  # in `dtype`, made before the timed calls
        return tf.Variable(tf.cast(value, dtype))

    def kernel(weight, in_dim: int):  # [in, out] as the model stores it, or [out, in]
        value = tf.reshape(tf.convert_to_tensor(weight), [in_dim, -1])
        return variable(tf.transpose(value) if transposed else value)

    def bias(weight):
        return variable(tf.reshape(tf.convert_to_tensor(weight), [-1]))

    projections = []
    for layer in model.decoder.stack:
        for attention, names in ((layer.self_attention, ("query", "key", "value", "output")),
                                 (layer.cross_attention, ("query", "output"))):
            projections += [(kernel(getattr(attention, f"{name}_kernel"), d_model),
                             bias(getattr(attention, f"{name}_bias"))) for name in names]
        projections += [(kernel(dense.kernel, dense.kernel.shape[0]), bias(dense.bias))
                        for dense in (layer.feed_forward.inner, layer.feed_forward.outer)]
    embeddings = variable(tf.convert_to_tensor(model.embedding.embeddings))  # [vocab, d_model]

    @tf.function
    def run():
        # transposed: E as stored, read with transpose_b like every kernel; else E^T, [in, out].
        table = embeddings if transposed else tf.transpose(embeddings)

        def step(t, x):
            for kernel, bias in projections:
                x = tf.nn.bias_add(tf.matmul(x, kernel, transpose_b=transposed), bias)
            logits = tf.matmul(x, table, transpose_b=transposed)
            # Keeps the values O(1) (no denormals) and the logits in the data flow.
            x = tf.cast(x, tf.float32)
            x = x * tf.math.rsqrt(tf.reduce_mean(tf.square(x)) + 1e-6)
            return t + 1, tf.cast(x + 1e-6 * tf.cast(tf.reduce_max(logits), tf.float32), dtype)

        return tf.while_loop(lambda t, x: t < OUTPUT_TOKENS, step,
                             (tf.constant(0), tf.ones([rows, d_model], dtype)))[1]

    return timed(run, reps, budget_seconds)


# Decoding formats on the same weights: our SavedModel in float32 and in bf16
# (`tfformer-export --precision`), CTranslate2's model from `tfformer-export --format
# ctranslate2` with float32 and int8 weights.
FORMATS = ("savedmodel-fp32", "savedmodel-bf16", "ctranslate2-fp32", "ctranslate2-int8")


def format_comparison(preset: str, model, tokenizer, extra: int, batches, reps: int,
                      budget_seconds: float, threads: int) -> list[dict]:
    """Each search (greedy, beam 4 with length penalty 0.6) and batch size, every format called
    in turn: median ms for OUTPUT_TOKENS output tokens, and each format's time over
    CTranslate2 fp32's."""
    import sentencepiece
    import tensorflow as tf
    from ct2_process import CT2Process
    from tensorflow.python.util import _pywrap_util_port

    from tfformer.decode.translator import Translator, in_precision
    from tfformer.export.saved_model import export_saved_model
    from tfformer.utils.cpu import matmul_flags

    machine = {"cpu_flags": matmul_flags(),
               "onednn": bool(_pywrap_util_port.IsMklEnabled()),
               "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
               # Set to AVX2, these make CTranslate2's kernels and MKL's GEMM run as on an
               # AVX2-only CPU (with TF_ENABLE_ONEDNN_OPTS=0: TensorFlow's default there).
               "CT2_FORCE_CPU_ISA": os.environ.get("CT2_FORCE_CPU_ISA"),
               "MKL_ENABLE_INSTRUCTIONS": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
               # TensorFlow's thread pools (unset: one intra-op thread per core).
               "TF_NUM_INTRAOP_THREADS": os.environ.get("TF_NUM_INTRAOP_THREADS"),
               "TF_NUM_INTEROP_THREADS": os.environ.get("TF_NUM_INTEROP_THREADS")}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        run = save_run(model, tokenizer, work)
        # Each CTranslate2 model in a process of its own, without TensorFlow (ct2_process.py:
        # in one process with it, or with each other, they decode slower).
        translators = {quantization: CT2Process.exported(
            run, os.path.join(work, f"ct2-{quantization}"), threads, quantization)
            for quantization in ("none", "int8")}
        pieces = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(work, "ct2-none", "tokenizer.model"))
        for search, beam_size in (("greedy", 1), ("beam4", 4)):
            signatures = {}
            for precision in ("fp32", "bf16"):
                translator = Translator(in_precision(model, precision), tokenizer,
                                        beam_size=beam_size, max_output_extra=extra)
                path = export_saved_model(translator, work, f"{search}-{precision}", 1)
                signatures[precision] = tf.saved_model.load(path).signatures["serving_default"]
            for batch in batches:
                inputs = tf.constant([SENTENCE] * batch)
                tokens = [pieces.encode(SENTENCE, out_type=str)] * batch

                def ct2(quantization, tokens=tokens, beam_size=beam_size, hypotheses=False):
                    return ct2_translate(translators[quantization], tokens, beam_size,
                                         hypotheses)

                # Ours: OUTPUT_TOKENS by construction (`build`); CTranslate2 stops at the same
                # limit, as EOS (a zero embedding) never wins there either.
                ct2_pieces = len(ct2("none", hypotheses=True)[0])
                timings = paired_all({
                    "savedmodel-fp32": lambda: signatures["fp32"](inputs=inputs),
                    "savedmodel-bf16": lambda: signatures["bf16"](inputs=inputs),
                    "ctranslate2-fp32": lambda: ct2("none"),
                    "ctranslate2-int8": lambda: ct2("int8"),
                }, reps * 2 if batch == 1 else reps, budget_seconds,
                    settle_seconds=SETTLE_SECONDS)
                reference = timings["ctranslate2-fp32"]["median_ms"]
                row = {"preset": preset, "search": search, "batch": batch,
                       **machine,  # beside every row: what sets each format's speed
                       "ctranslate2_output_pieces": ct2_pieces,
                       **{name: timings[name] for name in FORMATS},
                       "over_ctranslate2_fp32": {name: round(timings[name]["median_ms"]
                                                             / reference, 2)
                                                 for name in FORMATS}}
                if batch == 1:  # bound by reading the weights: what each cannot go below
                    floors = {name: matmul_floor(model, beam_size, reps * 2, budget_seconds,
                                                 dtype, transposed)["median_ms"]
                              for name, dtype, transposed in (
                                  ("fp32", "float32", False), ("bf16", "bfloat16", False),
                                  ("fp32_transposed", "float32", True),
                                  ("bf16_transposed", "bfloat16", True))}
                    for name, floor in floors.items():
                        row[f"matmul_floor_{name}_ms"] = floor
                    # The least a float32 export can take with TensorFlow's kernels (in either
                    # layout) over CTranslate2 fp32's whole decoding: a ratio ours cannot beat.
                    row["floor_over_ctranslate2_fp32"] = round(
                        min(floors["fp32"], floors["fp32_transposed"]) / reference, 2)
                    for precision in ("fp32", "bf16"):
                        row[f"savedmodel_{precision}_over_floor"] = round(
                            timings[f"savedmodel-{precision}"]["median_ms"] / floors[precision], 2)
                    # The most bf16 weights can gain over float32 with TensorFlow's kernels
                    # here, in the model's layout and stored transposed.
                    row["floor_fp32_over_bf16"] = round(floors["fp32"] / floors["bf16"], 2)
                    row["floor_fp32_over_bf16_transposed"] = round(
                        floors["fp32"] / floors["bf16_transposed"], 2)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        for translator in translators.values():
            translator.close()
    return rows


def ct2_translate(worker, tokens: list[list[str]], beam_size: int, hypotheses: bool = False):
    """The formats rows' CTranslate2 call: `tokens` searched as our exports search them (the
    length penalty 0.6, OUTPUT_TOKENS at most); with `hypotheses`, the best of each."""
    from tfformer.export.ctranslate2 import TRANSLATE_OPTIONS

    return worker.translate_batch(tokens, beam_size=beam_size, length_penalty=0.6,
                                  max_decoding_length=OUTPUT_TOKENS, hypotheses=hypotheses,
                                  **TRANSLATE_OPTIONS)


def save_run(model, tokenizer, work: str) -> str:
    """`work`/run, a run directory as training leaves it (model.keras, tokenizer.model), for
    the programs that export one."""
    run = os.path.join(work, "run")
    os.makedirs(run)
    model.save(os.path.join(run, "model.keras"))
    tokenizer.save(os.path.join(run, "tokenizer.model"))
    return run


def build(preset: str, tokenizer):
    import numpy as np

    from tfformer import Transformer, get_preset
    from tfformer.special_tokens import EOS_ID

    config = get_preset(preset, vocab_size=tokenizer.vocab_size, dropout=0.0)
    model = Transformer(config)
    model.build()
    weights = model.embedding.embeddings.numpy()
    weights[EOS_ID] = 0.0  # logit 0 never beats the best of thousands of random logits
    model.embedding.embeddings.assign(weights)
    source = np.concatenate([tokenizer.tokenize([SENTENCE])[0].numpy(), [EOS_ID]])
    return model, source.astype("int32")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="*", default=["tiny", "base"],
                        help="model presets to measure (none: only the gRPC transport)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of timed calls per measurement at most (after warm-up)")
    parser.add_argument("--formats", choices=("with", "only", "without"), default="with",
                        help="the comparison of our SavedModel (fp32, bf16) with CTranslate2 "
                             "(fp32, int8) on the same weights; needs the ctranslate2 extra")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CTranslate2's intra_threads (TensorFlow uses every core)")
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(0)  # before the tokenizer's tf-text resource
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.decode.search import beam_search, greedy_search
    from tfformer.decode.translator import Translator
    from tfformer.export.saved_model import export_saved_model
    from tfformer.serving import client, server

    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    from tfformer.utils.cpu import matmul_flags

    results = {"output_tokens": OUTPUT_TOKENS, "vocab_size": tokenizer.vocab_size,
               "tensorflow": tf.__version__, "cpu_count": os.cpu_count(),
               "cpu_flags": matmul_flags(), "rows": [], "formats": []}
    if args.formats != "only":
        results["transport"] = transport_overhead(200)
        print(json.dumps(results["transport"]), file=sys.stderr, flush=True)
    for preset in args.presets:
        model, source = build(preset, tokenizer)
        extra = OUTPUT_TOKENS - len(source)
        if args.formats != "without":
            from importlib.metadata import version

            results["ctranslate2"] = version("ctranslate2")  # not imported here (ct2_process.py)
            results["formats"] += format_comparison(preset, model, tokenizer, extra,
                                                    args.batches, args.reps, args.budget,
                                                    args.threads)
        if args.formats == "only":
            continue
        searches = {"greedy": lambda ids, cache: greedy_search(model, ids, extra, cache),
                    "beam4": lambda ids, cache: beam_search(model, ids, 4, 0.6, extra,
                                                            use_cache=cache)}
        for search_name, search in searches.items():
            cached, full = (tf.function(lambda ids, s=search, c=use_cache: s(ids, c),
                                        input_signature=[tf.TensorSpec([None, None], tf.int32)])
                            for use_cache in (True, False))
            for batch in args.batches:
                ids = tf.constant(np.tile(source, [batch, 1]))
                lengths = [int(tf.reduce_max(tf.reduce_sum(
                    tf.cast(function(ids).tokens[:, 0] > 0, tf.int32), axis=1)))
                    for function in (cached, full)]
                # Already warmed up by the length check above.
                timings = paired(lambda: cached(ids), lambda: full(ids),
                                 args.reps * 2 if batch == 1 else args.reps, args.budget,
                                 warm_up=False)
                for mode, length, timing in zip(("cached", "full"), lengths, timings):
                    row = {"preset": preset, "search": search_name, "batch": batch,
                           "mode": mode, "where": "in-process", "output_tokens": length,
                           **timing}
                    results["rows"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        for search_name, beams in (("greedy", 1), ("beam4", 4)):
            for batch in args.batches:
                row = {"preset": preset, "search": search_name, "batch": batch,
                       "mode": "matmul-floor", "where": "in-process",
                       **matmul_floor(model, batch * beams, args.reps * 2, args.budget)}
                results["rows"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)

        # The same search as a string-in/string-out SavedModel, in process vs over gRPC.
        with tempfile.TemporaryDirectory() as base:
            for search_name, beam_size in (("greedy", 1), ("beam4", 4)):
                translator = Translator(model, tokenizer, beam_size=beam_size,
                                        max_output_extra=extra)
                name = f"{preset}-{search_name}"
                path = export_saved_model(translator, base, name, 1)
                loaded = tf.saved_model.load(path)
                signature = loaded.signatures["serving_default"]
                with server.start_server(os.path.join(base, name), name, max_batch_size=64) \
                        as handle:
                    import grpc

                    channel = grpc.insecure_channel(handle.address)
                    for batch in args.batches:
                        sentences = [SENTENCE] * batch
                        inputs = tf.constant(sentences)
                        local, remote = paired(
                            lambda: signature(inputs=inputs),
                            lambda: client.translate(sentences, server=handle.address,
                                                     model=name, timeout=600, channel=channel),
                            args.reps * 4 if batch == 1 else args.reps, args.budget)
                        for where, timing in (("saved-model", local), ("grpc", remote)):
                            row = {"preset": preset, "search": search_name, "batch": batch,
                                   "mode": "cached", "where": where, **timing}
                            results["rows"].append(row)
                            print(json.dumps(row), file=sys.stderr, flush=True)
                    channel.close()

    rows = results["rows"]

    def same_case(row: dict, mode: str, where: str) -> dict:
        return next(r for r in rows if r["mode"] == mode and r["where"] == where
                    and all(r[k] == row[k] for k in ("preset", "search", "batch")))

    summary = []
    for row in rows:
        case = {"preset": row["preset"], "search": row["search"], "batch": row["batch"]}
        if row["where"] == "in-process" and row["mode"] == "full":
            cached = same_case(row, "cached", "in-process")
            floor = same_case(row, "matmul-floor", "in-process")
            summary.append({**case,
                            "cache_speedup": round(row["median_ms"] / cached["median_ms"], 1),
                            "largest_possible_speedup": round(
                                row["median_ms"] / floor["median_ms"], 1)})
        if row["where"] == "grpc":
            local = same_case(row, "cached", "saved-model")
            summary.append({**case,
                            "grpc_overhead_ms": round(row["median_ms"] - local["median_ms"], 2)})
    results["summary"] = summary
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An OPUS-MT-sized Marian model, imported: its SavedModel against what OPUS-MT users run today
(transformers' generate, PyTorch) and against CTranslate2 fp32 on the same weights.

    python benchmarks/decoding/opus_mt.py --out benchmarks/results/opus_mt.json

Makes a Hugging Face Marian directory of OPUS-MT's size (d_model 512, 6 + 6 layers, 8 heads,
d_ff 2048, swish, a vocabulary of 58101 ids; random weights: no hub here), times
`tfformer-import` (wall seconds and peak memory of its process), exports the imported run
(greedy and beam 4, `--length-penalty-form power`) and converts the directory with CTranslate2's
TransformersConverter. Then every engine translates the same sentence in batches of 1 and 32
with the same number of output tokens (EOS is made impossible until the limit), each in a
process of its own with 2 threads (in one process they slow each other), the engines in turn
round after round; ratios are of medians measured in this run. The CPU's matmul flags are
named in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SENTENCE = "Los tres perros rojos comen manzanas verdes en el parque."
ENGINES = ("savedmodel", "transformers", "ctranslate2")


# -- the engines, each run in a process of its own (`--worker`) ------------------------------

def _worker(engine: str, path: str, marian_dir: str, batch: int, beam: int, output_tokens: int,
            reps: int, threads: int) -> dict:
    """Median ms of `reps` calls (after one warm-up) of `engine` on `batch` copies of SENTENCE,
    and the output length of the first."""
    sentences = [SENTENCE] * batch
    if engine == "savedmodel":
        os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the SentencePiece ops)

        signature = tf.saved_model.load(path).signatures["serving_default"]
        inputs = tf.constant(sentences)

        def call():
            return signature(inputs=inputs)["translations"].numpy()[0].decode()
    elif engine == "transformers":
        import torch
        from transformers import MarianMTModel, MarianTokenizer

        torch.set_num_threads(threads)
        tokenizer = MarianTokenizer.from_pretrained(marian_dir)
        model = MarianMTModel.from_pretrained(marian_dir).eval()
        inputs = tokenizer(sentences, return_tensors="pt", padding=True)

        def call():
            with torch.no_grad():
                out = model.generate(**inputs, num_beams=beam, do_sample=False,
                                     max_new_tokens=output_tokens, early_stopping="never")
            return tokenizer.decode(out[0], skip_special_tokens=True)
    else:
        import ctranslate2
        from transformers import MarianTokenizer

        tokenizer = MarianTokenizer.from_pretrained(marian_dir)
        translator = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                            intra_threads=threads)
        tokens = [tokenizer.convert_ids_to_tokens(tokenizer(SENTENCE)["input_ids"])] * batch

        def call():
            result = translator.translate_batch(tokens, beam_size=beam,
                                                max_decoding_length=output_tokens,
                                                min_decoding_length=0)
            return " ".join(result[0].hypotheses[0])
    first = call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"median_ms": round(1000 * statistics.median(times), 2), "runs": reps,
            "output": first}


def run_worker(engine, path, marian_dir, batch, beam, output_tokens, reps, threads) -> dict:
    command = [sys.executable, __file__, "--worker", engine, "--path", path, "--marian-dir",
               marian_dir, "--batch", str(batch), "--beam", str(beam), "--output-tokens",
               str(output_tokens), "--reps", str(reps), "--threads", str(threads)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the model -------------------------------------------------------------------------------

def make_directory(path: str, d_model: int, layers: int, heads: int, d_ff: int,
                   vocab_size: int) -> None:
    """An OPUS-MT-shaped Marian directory with random weights, EOS impossible before the
    limit (its logits bias -1e4)."""
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    sys.path.insert(0, ROOT)
    from tests.marian_dir import marian_vocabulary, spm_pieces, train_spm
    from tfformer.data.builtin.grammar import builtin_pairs

    os.makedirs(path, exist_ok=True)
    pairs = builtin_pairs("train", 400)
    source, target = train_spm([s for s, _ in pairs], 400), train_spm([t for _, t in pairs], 400)
    for name, model in (("source.spm", source), ("target.spm", target)):
        with open(os.path.join(path, name), "wb") as f:
            f.write(model)
    pieces = spm_pieces(source) + spm_pieces(target)
    filler = [f"▁filler{i}" for i in range(vocab_size)]  # to OPUS-MT's vocabulary size
    vocabulary = marian_vocabulary(pieces + filler)
    vocabulary = {p: i for p, i in vocabulary.items() if i < vocab_size - 1}
    vocabulary["<pad>"] = vocab_size - 1
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    config = MarianConfig(
        vocab_size=vocab_size, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff, activation_function="swish", max_position_embeddings=512,
        scale_embedding=True, pad_token_id=vocab_size - 1,
        decoder_start_token_id=vocab_size - 1, eos_token_id=0, forced_eos_token_id=0)
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, 0] = -1e4
    model.generation_config.bad_words_ids = [[vocab_size - 1]]
    model.save_pretrained(path)
    MarianTokenizer(os.path.join(path, "source.spm"), os.path.join(path, "target.spm"),
                    os.path.join(path, "vocab.json")).save_pretrained(path)


def timed_process(command: list[str]) -> dict:
    """Wall seconds and peak resident memory (MiB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"seconds": round(time.perf_counter() - start, 2),
            # ru_maxrss is the largest child's so far: the import runs first, so it is its own.
            "peak_memory_mib": round(max(peak, before) / 1024, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the JSON report here (default: stdout only)")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d-ff", type=int, default=2048)
    parser.add_argument("--vocab-size", type=int, default=58101)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--output-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--marian-dir", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.path, args.marian_dir, args.batch,
                                 args.beam, args.output_tokens, args.reps, args.threads)))
        return 0

    sys.path.insert(0, ROOT)
    from tfformer.utils.cpu import matmul_flags

    work = tempfile.mkdtemp(prefix="opus-mt-bench-")
    try:
        marian = os.path.join(work, "marian")
        make_directory(marian, args.d_model, args.layers, args.heads, args.d_ff,
                       args.vocab_size)
        run_dir = os.path.join(work, "run")
        imported = timed_process([sys.executable, "-m", "tfformer.cli.import_pretrained",
                                  marian, "--out", run_dir])
        # The export's limit is source tokens + extra: the sentence's tokens, counted by the
        # tokenizer the export uses.
        from tfformer.data.marian_pieces import MarianPieces

        source_length = len(MarianPieces.from_dir(run_dir).encode_source([SENTENCE])[0])
        extra = args.output_tokens - source_length
        if extra < 0:
            parser.error(f"--output-tokens must be at least the sentence's {source_length} "
                         "source tokens")
        check = os.path.join(work, "check.txt")
        with open(check, "w", encoding="utf-8") as f:
            f.write(SENTENCE + "\n")
        paths = {}
        for search, beam in (("greedy", 1), ("beam4", 4)):
            subprocess.run([sys.executable, "-m", "tfformer.cli.export", run_dir,
                            "--model-base-path", os.path.join(work, "models"), "--name", search,
                            "--beam-size", str(beam), "--length-penalty", "1.0",
                            "--length-penalty-form", "power", "--max-output-extra", str(extra),
                            "--check-sentences", check], check=True,
                           capture_output=True, text=True,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
            paths[search] = os.path.join(work, "models", search, "1")
        import ctranslate2

        ct2_dir = os.path.join(work, "ct2")
        ctranslate2.converters.TransformersConverter(marian).convert(ct2_dir)
        rows = []
        for search, beam in (("greedy", 1), ("beam4", 4)):
            for batch in (int(b) for b in args.batches.split(",")):
                medians = {engine: [] for engine in ENGINES}
                outputs = {}
                for _ in range(args.rounds):
                    for engine in ENGINES:
                        path = {"savedmodel": paths[search], "transformers": marian,
                                "ctranslate2": ct2_dir}[engine]
                        result = run_worker(engine, path, marian, batch, beam,
                                            args.output_tokens, args.reps, args.threads)
                        medians[engine].append(result["median_ms"])
                        outputs[engine] = result["output"]
                ms = {engine: round(statistics.median(values), 2)
                      for engine, values in medians.items()}
                rows.append({"search": search, "batch": batch, "median_ms": ms,
                             "per_round_ms": medians, "first_output": outputs,
                             "savedmodel_over_transformers": round(
                                 ms["savedmodel"] / ms["transformers"], 3),
                             "savedmodel_over_ctranslate2_fp32": round(
                                 ms["savedmodel"] / ms["ctranslate2"], 3)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"benchmark": "opus_mt", "cpu_flags": matmul_flags(), "cores": os.cpu_count(),
              "threads": args.threads,
              "model": {"d_model": args.d_model, "layers": args.layers, "heads": args.heads,
                        "d_ff": args.d_ff, "vocab_size": args.vocab_size,
                        "activation": "swish", "weights": "random"},
              "output_tokens": args.output_tokens, "reps": args.reps, "rounds": args.rounds,
              "import": imported, "rows": rows}
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

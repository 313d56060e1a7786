"""CTranslate2 in a process of its own, for the benchmarks that time it against our exports.

In the process that runs TensorFlow, or beside a second `ctranslate2.Translator`, CTranslate2
decodes slower than it does alone. On the 2-core AVX-512 EPYC, the tiny model's beam 4 at batch
32 took 200-210 ms with one Translator in the process and 370-430 ms once a second one (int8)
had been made, even after that one was deleted (OMP_WAIT_POLICY=ACTIVE: 630 ms; the threads of
the OpenMP runtime in its wheel are shared by the process). A server holds one model per
process; so does the benchmark, with this worker:

    worker = CT2Process(model_dir, threads=2, compute_type="int8")
    worker = CT2Process.exported(run_dir, model_dir, threads=2)  # tfformer-export, then the above
    worker.translate_batch([pieces, ...], beam_size=4)   # the best hypothesis of each
    worker.score_batch([pieces, ...], [pieces, ...])     # each target's log-probabilities
    worker.close()

The worker imports ctranslate2 alone, reads one JSON request per line on stdin and answers
one line on stdout. A call's time, as the caller measures it, includes the pipe (~0.1 ms).
"""

from __future__ import annotations

import json
import subprocess
import sys


class CT2Process:
    """A `ctranslate2.Translator` (inter_threads=1, intra_threads=`threads`) in a child
    process."""

    def __init__(self, model_dir: str, threads: int, compute_type: str = "default"):
        self.process = subprocess.Popen(
            [sys.executable, __file__, model_dir, str(threads), compute_type],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.process.stdout.readline()
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the CTranslate2 worker for {model_dir} did not start")

    @classmethod
    def exported(cls, run_dir: str, model_dir: str, threads: int,
                 quantization: str = "none") -> "CT2Process":
        """`tfformer-export RUN_DIR --format ctranslate2` into `model_dir` (its own check loads
        the model in CTranslate2, in that process), then a worker on it."""
        subprocess.run([sys.executable, "-m", "tfformer.cli.export", run_dir, "--format",
                        "ctranslate2", "--out", model_dir, "--quantization", quantization],
                       check=True, stdout=subprocess.DEVNULL)
        return cls(model_dir, threads)

    def translate_batch(self, tokens: list[list[str]], *, hypotheses: bool = False,
                        **options) -> list[list[str]] | None:
        """`Translator.translate_batch(tokens, **options)`; with `hypotheses`, the best
        hypothesis of each sentence (else None, and nothing crosses the pipe)."""
        return self._call({"tokens": tokens, "options": options,
                           "hypotheses": hypotheses})["hypotheses"]

    def score_batch(self, sources: list[list[str]], targets: list[list[str]], *,
                    log_probs: bool = False, **options) -> list[list[float]] | None:
        """`Translator.score_batch(sources, targets, **options)`; with `log_probs`, each
        target's log-probabilities (else None, and nothing crosses the pipe)."""
        return self._call({"tokens": sources, "targets": targets, "options": options,
                           "log_probs": log_probs})["log_probs"]

    def _call(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the CTranslate2 worker exited ({self.process.wait()})")
        return json.loads(answer)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=60)

    def __enter__(self) -> "CT2Process":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve(model_dir: str, threads: int, compute_type: str) -> None:
    import ctranslate2

    translator = ctranslate2.Translator(model_dir, device="cpu", compute_type=compute_type,
                                        inter_threads=1, intra_threads=threads)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "targets" in request:
            results = translator.score_batch(request["tokens"], request["targets"],
                                             **request["options"])
            print(json.dumps({"log_probs": [result.log_probs for result in results]
                              if request["log_probs"] else None}), flush=True)
            continue
        results = translator.translate_batch(request["tokens"], **request["options"])
        best = ([result.hypotheses[0] for result in results] if request["hypotheses"]
                else None)
        print(json.dumps({"hypotheses": best}), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])

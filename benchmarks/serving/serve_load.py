"""`tfformer-serve` under load: 1, 4 and 16 concurrent clients over gRPC and REST, request
batching off and on, then a soak of many requests. JSON on stdout.

    .venv/bin/python benchmarks/serving/serve_load.py > benchmarks/results/serve_load.json
    .venv/bin/python benchmarks/serving/serve_load.py --seconds 3 --soak 500   # a quick look
    .venv/bin/python benchmarks/serving/serve_load.py --beam-size 1 --tensorflow-threads 1 \
        > benchmarks/results/serve_load_epyc_greedy.json   # greedy, one thread per pool

The server is the `tfformer-serve` program in its own process, serving the export of decode.py's
random tiny model (beam 4, the export's default search, or --beam-size; every translation is
--output-tokens long). Each client is a thread that sends one sentence per request, the next as
soon as the answer is back, for --seconds. Batching on is `--enable-batching` with a parameters
file of max_batch_size 32, batch_timeout_micros 0 (a batch is what waits once a batch thread is
free) and two batch threads (of the settings tried, 1 or 2 threads, 0 or 20 ms, the fastest at
16 clients). The `in_process` rows bound what any server could reach: the signature called in
the benchmark's process on batches of 1 and 16 sentences, as sentences/s. Reported per row:
requests/s, p50 and p99 latency, the server's RSS; the soak (batching on, 16 gRPC clients)
reports errors and the RSS after its first tenth of requests (warm) and at its end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# benchmarks/decoding/: decode.py's model and sentence.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "decoding"))

from decode import SENTENCE, build  # noqa: E402

BATCHING = ("max_batch_size { value: 32 }\nbatch_timeout_micros { value: 0 }\n"
            "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 100 }\n")


def export(work: str, output_tokens: int, beam_size: int) -> str:
    """decode.py's random tiny model, searching with `beam_size` (1: greedy), as
    work/models/tfformer/1: the model base path."""
    import keras

    keras.utils.set_random_seed(0)
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer
    from tfformer.decode.translator import Translator
    from tfformer.export.saved_model import export_saved_model

    tokenizer = Tokenizer.train([s for p in builtin_pairs("train", n=5000) for s in p], 4000)
    model, source = build("tiny", tokenizer)
    translator = Translator(model, tokenizer, beam_size=beam_size,
                            max_output_extra=output_tokens - len(source))
    export_saved_model(translator, os.path.join(work, "models"), "tfformer", 1)
    return os.path.join(work, "models", "tfformer")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


class Server:
    """`tfformer-serve` in a process, gRPC and REST on free ports."""

    def __init__(self, base: str, batching_file: str | None, threads: int = 0):
        with socket.socket() as sock:  # --rest-api-port 0 is "off": pick a free one here
            sock.bind(("127.0.0.1", 0))
            rest_port = sock.getsockname()[1]
        command = [sys.executable, "-m", "tfformer.cli.serve", "--model-base-path", base,
                   "--port", "0", "--rest-api-port", str(rest_port), "--workers", "32",
                   "--poll-seconds", "0", "--log-level", "WARNING"]
        if batching_file:
            command += ["--enable-batching", "--batching-parameters-file", batching_file]
        if threads:
            command += ["--tensorflow-intra-op-parallelism", str(threads),
                        "--tensorflow-inter-op-parallelism", str(threads)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        lines = [self.process.stdout.readline() for _ in range(2)]
        if not all(" listening on " in line for line in lines):
            self.stop()
            raise RuntimeError(f"tfformer-serve did not start: {lines}")
        self.grpc = lines[0].strip().rsplit(" ", 1)[-1]
        self.rest = lines[1].strip().rsplit(" ", 1)[-1]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def grpc_caller(address: str):
    import grpc

    from tfformer.serving import client

    channel = grpc.insecure_channel(address)
    stub = client.prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = client.make_predict_request([SENTENCE])

    def call() -> None:
        stub.Predict(request, timeout=120)

    return call, channel.close


def rest_caller(address: str):
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    body = json.dumps({"instances": [SENTENCE]})

    def call() -> None:
        connection.request("POST", "/v1/models/tfformer:predict", body,
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {payload[:200]!r}")

    return call, connection.close


def load(server: Server, protocol: str, clients: int, seconds: float | None,
         requests: int | None = None, on_progress=None) -> dict:
    """`clients` threads calling for `seconds` (or until `requests` in all): latencies, errors."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds if seconds else None
    remaining = [requests]

    def worker() -> None:
        call, close = (grpc_caller(server.grpc) if protocol == "grpc"
                       else rest_caller(server.rest))
        try:
            while True:
                with lock:
                    if remaining[0] is not None:
                        if remaining[0] == 0:
                            return
                        remaining[0] -= 1
                if stop_at and time.monotonic() > stop_at:
                    return
                start = time.perf_counter()
                try:
                    call()
                    failed = None
                except Exception as error:  # noqa: BLE001 - counted
                    failed = f"{type(error).__name__}: {error}"[:200]
                with lock:
                    if failed:
                        errors.append(failed)
                    else:
                        latencies.append(time.perf_counter() - start)
                    if on_progress:
                        on_progress(len(latencies) + len(errors))
        finally:
            close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"requests": len(latencies), "errors": len(errors), "first_errors": errors[:3],
            "requests_per_second": round(len(latencies) / elapsed, 2),
            "p50_ms": round(1000 * statistics.median(ordered), 1) if ordered else None,
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1)
            if ordered else None}


def in_process(base: str) -> list[dict]:
    """The export's serving_default called here on 1 and 16 sentences: sentences/s."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    signature = tf.saved_model.load(os.path.join(base, "1")).signatures["serving_default"]
    rows = []
    for batch in (1, 16):
        inputs = tf.constant([SENTENCE] * batch)
        signature(inputs=inputs)
        times = []
        for _ in range(20 if batch == 1 else 8):
            start = time.perf_counter()
            signature(inputs=inputs)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        rows.append({"batch": batch, "median_ms": round(1000 * median, 1),
                     "sentences_per_second": round(batch / median, 1)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=10.0, help="per row")
    parser.add_argument("--soak", type=int, default=10_000, help="requests of the soak")
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--beam-size", type=int, default=4, help="the export's search; 1: greedy")
    parser.add_argument("--tensorflow-threads", type=int, default=0,
                        help="the server's intra- and inter-op pool sizes (0: TensorFlow's)")
    parser.add_argument("--protocols", nargs="+", default=["grpc", "rest"])
    parser.add_argument("--batching-parameters", default=BATCHING,
                        help="the text of the batching parameters file")
    args = parser.parse_args(argv)

    from tfformer.utils.cpu import matmul_flags

    results = {"cpu_count": os.cpu_count(), "cpu_flags": matmul_flags(),
               "output_tokens": args.output_tokens,
               "search": "greedy" if args.beam_size == 1 else f"beam {args.beam_size}",
               "tensorflow_threads": args.tensorflow_threads,
               "batching_parameters": args.batching_parameters, "rows": []}
    with tempfile.TemporaryDirectory() as work:
        base = export(work, args.output_tokens, args.beam_size)
        results["in_process"] = in_process(base)
        print(json.dumps(results["in_process"]), file=sys.stderr, flush=True)
        batching_file = os.path.join(work, "batching.config")
        with open(batching_file, "w", encoding="utf-8") as f:
            f.write(args.batching_parameters)
        for batching in (False, True):
            server = Server(base, batching_file if batching else None, args.tensorflow_threads)
            try:
                load(server, "grpc", 2, None, requests=4)  # warm both paths
                load(server, "rest", 2, None, requests=4)
                for protocol in args.protocols:
                    for clients in args.clients:
                        row = {"batching": batching, "protocol": protocol, "clients": clients,
                               **load(server, protocol, clients, args.seconds),
                               "server_rss_mb": round(rss_mb(server.process.pid), 1)}
                        results["rows"].append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
                if batching and args.soak:
                    marks = {}
                    warm = max(args.soak // 10, 1)

                    def progress(done, pid=server.process.pid):
                        if done in (warm, args.soak) and done not in marks:
                            marks[done] = rss_mb(pid)

                    soak = load(server, "grpc", 16, None, requests=args.soak,
                                on_progress=progress)
                    marks.setdefault(args.soak, rss_mb(server.process.pid))
                    soak.update(rss_warm_mb=round(marks[warm], 1),
                                rss_end_mb=round(marks[args.soak], 1),
                                rss_growth=round(marks[args.soak] / marks[warm] - 1, 4))
                    results["soak"] = soak
                    print(json.dumps({"soak": soak}), file=sys.stderr, flush=True)
            finally:
                server.stop()

    def row(batching: bool, protocol: str, clients: int) -> dict:
        return next(r for r in results["rows"] if (r["batching"], r["protocol"], r["clients"])
                    == (batching, protocol, clients))

    results["batching_on_over_off"] = [
        {"protocol": protocol, "clients": clients,
         "requests_per_second": round(row(True, protocol, clients)["requests_per_second"]
                                      / row(False, protocol, clients)["requests_per_second"], 2),
         "p50": round(row(True, protocol, clients)["p50_ms"]
                      / row(False, protocol, clients)["p50_ms"], 2)}
        for protocol in args.protocols for clients in args.clients]
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

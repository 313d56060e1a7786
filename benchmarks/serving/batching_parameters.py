"""Request batching settings compared under load: the shipped `serving/batching_parameters.txt`,
TF Serving's CPU guidance (`num_batch_threads` = cores, a high `max_batch_size`,
`batch_timeout_micros` 0 then 1-10 ms, `max_enqueued_batches` = `num_batch_threads`) and no
batching, each served by `tfformer-serve` in its own process. JSON on stdout.

    .venv/bin/python benchmarks/serving/batching_parameters.py \
        > benchmarks/results/batching_parameters.json

The model and the load are serve_load.py's (decode.py's random tiny model, beam 4, every
translation 24 tokens; each gRPC client a thread sending one sentence per request, the next as
soon as the answer is back). Servers take turns, round after round, so that a machine's drift
hits every setting alike. Per setting and client count: requests/s (the mean of the rounds),
p50 and p99 (their medians), and `over_unbatched`, requests/s over no batching's at the same
client count. `best` is the setting of the highest geometric mean of `over_unbatched` over the
client counts among those that keep a lone client within 10% of no batching's requests/s:
batching that merges many clients' requests without costing a lone client's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serve_load import Server, export, load  # noqa: E402


def parameters(max_batch_size: int, timeout_micros: int, threads: int, enqueued: int) -> str:
    return (f"max_batch_size {{ value: {max_batch_size} }}\n"
            f"batch_timeout_micros {{ value: {timeout_micros} }}\n"
            f"max_enqueued_batches {{ value: {enqueued} }}\n"
            f"num_batch_threads {{ value: {threads} }}\n")


def shipped() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "serving", "batching_parameters.txt"), encoding="utf-8") as f:
        return "".join(line for line in f if not line.startswith("#"))


def candidates(cores: int) -> dict[str, str | None]:
    return {
        "no batching": None,
        "shipped": shipped(),
        "guide, timeout 0": parameters(128, 0, cores, cores),
        "guide, timeout 0.5 ms": parameters(128, 500, cores, cores),
        "guide, timeout 1 ms": parameters(128, 1000, cores, cores),
        "guide, timeout 2 ms": parameters(128, 2000, cores, cores),
        "guide, timeout 5 ms": parameters(128, 5000, cores, cores),
        "guide, timeout 0, 1 thread": parameters(128, 0, 1, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=8.0, help="per row and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--settings", nargs="+", default=None, metavar="NAME",
                        help="only these of the settings (no batching is always served)")
    args = parser.parse_args(argv)

    from tfformer.utils.cpu import matmul_flags

    cores = os.cpu_count() or 1
    settings = candidates(cores)
    if args.settings:
        unknown = set(args.settings) - set(settings)
        if unknown:
            parser.error(f"unknown settings {sorted(unknown)}; known: {list(settings)}")
        settings = {name: text for name, text in settings.items()
                    if name == "no batching" or name in args.settings}
    measured: dict[str, dict[int, list[dict]]] = {
        name: {clients: [] for clients in args.clients} for name in settings}
    with tempfile.TemporaryDirectory() as work:
        base = export(work, args.output_tokens, args.beam_size)
        for round_ in range(args.rounds):
            for index, (name, text) in enumerate(settings.items()):
                path = None
                if text is not None:
                    path = os.path.join(work, f"batching-{index}.config")
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(text)
                server = Server(base, path)
                try:
                    load(server, "grpc", 2, None, requests=4)  # warm
                    for clients in args.clients:
                        row = load(server, "grpc", clients, args.seconds)
                        measured[name][clients].append(row)
                        print(json.dumps({"round": round_, "setting": name, "clients": clients,
                                          **row}), file=sys.stderr, flush=True)
                finally:
                    server.stop()

    rows = []
    for name, by_clients in measured.items():
        for clients, runs in by_clients.items():
            rows.append({
                "setting": name, "clients": clients,
                "requests_per_second": round(statistics.mean(
                    r["requests_per_second"] for r in runs), 2),
                "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                "p99_ms": statistics.median(r["p99_ms"] for r in runs),
                "errors": sum(r["errors"] for r in runs),
                "rounds": [r["requests_per_second"] for r in runs]})
    unbatched = {r["clients"]: r["requests_per_second"] for r in rows
                 if r["setting"] == "no batching"}
    for row in rows:
        row["over_unbatched"] = round(row["requests_per_second"] / unbatched[row["clients"]], 3)
    batched = [name for name in settings if name != "no batching"]
    ratios = {name: [r["over_unbatched"] for r in rows if r["setting"] == name]
              for name in batched}
    lone = min(args.clients)
    mean = {name: round(statistics.geometric_mean(ratios[name]), 3) for name in batched}
    kept = [name for name in batched if next(
        r["over_unbatched"] for r in rows if r["setting"] == name and r["clients"] == lone) >= 0.9]
    best = max(kept or batched, key=mean.get)
    json.dump({"cpu_count": cores, "cpu_flags": matmul_flags(), "search": f"beam {args.beam_size}"
               if args.beam_size > 1 else "greedy", "output_tokens": args.output_tokens,
               "seconds": args.seconds, "rounds": args.rounds, "settings": settings,
               "rows": rows, "geometric_mean_over_unbatched": mean,
               "lone_client_within_10_percent": kept, "best": best,
               "best_parameters": settings[best]}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make demo`: the main job, end to end.

1. tfformer-train with no arguments: the tiny preset on the built-in Spanish->English corpus
   (runs/tiny-builtin; running the demo again reuses the finished run);
2. tfformer-export: a new version under models/tfformer/, checked op by op for stock TF
   Serving and reloaded in a fresh process;
3. translate sentences through the local TF Serving stand-in over gRPC, with the official
   PredictionService stub, exactly as against a real TF Serving.
"""

from __future__ import annotations

import json
import os
import sys

from tfformer.cli.train import DEFAULT_OUT
from tfformer.contract import DEFAULT_MODEL_NAME

RUN_DIR = DEFAULT_OUT  # where tfformer-train with no arguments trains
MODEL_BASE_PATH = "models"
MODEL_NAME = DEFAULT_MODEL_NAME
SENTENCES = [
    "Los tres perros rojos comen manzanas verdes.",
    "Mi hermana no visita el puente azul los lunes.",
    "Hay doscientas cuarenta y una lámparas grises debajo de la mesa.",
    "El niño pequeño bebe el zumo de la niña.",
]


def main() -> int:
    from tfformer.cli import train

    print("== 1. train (tfformer-train with no arguments)", flush=True)
    if train.main([]) != 0:
        return 1
    print("\n== 2. export (tfformer-export)", flush=True)
    from tfformer.cli import export

    if export.main([RUN_DIR, "--model-base-path", MODEL_BASE_PATH, "--name", MODEL_NAME]) != 0:
        return 1
    print("\n== 3. translate over gRPC (local TF Serving stand-in, official stub)", flush=True)
    from tfformer.serving import client, server

    with server.start_server(os.path.join(MODEL_BASE_PATH, MODEL_NAME), MODEL_NAME) as handle:
        translations = client.translate(SENTENCES, server=handle.address, model=MODEL_NAME,
                                        timeout=120)
    for source, translation in zip(SENTENCES, translations):
        print(f"  {source}\n  -> {translation.text}  (score {translation.score:.3f})")
    print("\nServe it yourself:  .venv/bin/tfformer-serve --model-base-path models/tfformer\n"
          "Translate:          .venv/bin/tfformer-translate 'Una hermana visita el puente.'")
    print(json.dumps({"translations": [t.text for t in translations]}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

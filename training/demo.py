"""`make demo`: a short forward/backward smoke run of the tiny preset on a toy reversal task.

Replaced by the full main job (train on the built-in corpus, export, translate) once the
training program exists.
"""

import numpy as np

from tfformer import Transformer, compile_transformer, get_preset
from tfformer.special_tokens import BOS_ID, EOS_ID, NUM_RESERVED


def main() -> None:
    config = get_preset("tiny", vocab_size=32, dropout=0.0, warmup_steps=100)
    rng = np.random.default_rng(0)
    symbols = rng.integers(NUM_RESERVED, 32, size=(2048, 6)).astype("int32")
    eos = np.full((2048, 1), EOS_ID, "int32")
    source = np.concatenate([symbols, eos], 1)
    target_in = np.concatenate([np.full((2048, 1), BOS_ID, "int32"), symbols[:, ::-1]], 1)
    target_out = np.concatenate([symbols[:, ::-1], eos], 1)
    model = compile_transformer(Transformer(config))
    model.fit((source, target_in), target_out, batch_size=64, epochs=3, verbose=2)
    print(f"parameters: {model.count_params():,}")


if __name__ == "__main__":
    main()

"""Alignment quality on the built-in corpus, where the gold alignment of a noun phrase is known:
Spanish puts the adjective after the noun ("los perros rojos"), English before it ("the red
dogs"). JSON on stdout.

    # ~12 minutes:
    .venv/bin/python benchmarks/decoding/alignments.py > benchmarks/results/alignments.json
    .venv/bin/python benchmarks/decoding/alignments.py --minutes 0.3 --sentences 20         # quick

Trains the tiny preset on the built-in corpus for `--minutes` (`run.train`, as tfformer-train
does; a rerun with the same `--out` continues), then translates held-out sentences that hold a
noun followed by one adjective with beam search, as `translate_align` does. Where the
translation holds the English "ADJECTIVE NOUN" of that phrase, it checks the alignment of the
first piece of each of the two English words: right when it points at a piece of the Spanish
word it translates. Reported per decoder layer (each averaged over heads): the export uses the
last (`tfformer.decode.alignments`), fairseq's default; a crossing is both words right, the
reordering reproduced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def word_of_pieces(pieces: list[str]) -> list[int]:
    """The word index of each SentencePiece piece: a piece starting with "▁" starts a word."""
    words, index = [], -1
    for piece in pieces:
        if piece.startswith("\u2581") or index < 0:
            index += 1
        words.append(index)
    return words


def gold_words() -> tuple[dict[str, str], dict[str, str]]:
    """The built-in vocabulary's English word of each Spanish noun form and adjective form."""
    from tfformer.data.builtin.vocabulary import ADJECTIVES, NOUNS

    nouns = {form: noun.en_plural if form == noun.es_plural else noun.en
             for noun in NOUNS.values() for form in (noun.es, noun.es_plural)}
    return nouns, {form: a.en for a in ADJECTIVES.values() for form in a.forms}


def phrases(pairs, nouns, adjectives):
    """(source, source noun word, source adjective word, English adjective, English noun) of each
    pair whose Spanish has NOUN ADJECTIVE with the English ADJECTIVE NOUN."""
    found = []
    for source, target in pairs:
        words = [w.strip(".,;¿?¡!").lower() for w in source.split()]
        english = " ".join(w.strip(".,;¿?¡!").lower() for w in target.split())
        for k in range(len(words) - 1):
            noun, adjective = nouns.get(words[k]), adjectives.get(words[k + 1])
            if noun and adjective and f"{adjective} {noun}" in english:
                found.append((source, k, k + 1, adjective, noun))
                break
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "alignments-builtin"))
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sentences", type=int, default=300, help="test sentences scanned")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, ROOT)
    import numpy as np
    import tensorflow as tf

    from tfformer import run
    from tfformer.data.builtin import builtin_pairs
    from tfformer.decode.translator import load_translator
    from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID
    from tfformer.train.settings import TrainSettings
    from tfformer.utils.cpu import matmul_flags

    started = time.time()
    result = run.train(args.out, "tiny", TrainSettings(
        data="builtin", steps=1_000_000, max_minutes=args.minutes, steps_per_epoch=250,
        dev_sentences=0, verbose=0))
    train_minutes = (time.time() - started) / 60
    translator = load_translator(args.out)
    tokenizer, model = translator.tokenizer, translator.model

    cases = phrases(builtin_pairs("test", args.sentences), *gold_words())
    layers = model.transformer_config.num_decoder_layers
    right = {"adjective": np.zeros(layers), "noun": np.zeros(layers), "crossing": np.zeros(layers)}
    counted = 0
    for source, noun_word, adjective_word, adjective_en, noun_en in cases:
        source_ids = tokenizer.encode_source(tf.constant([source])).to_tensor(PAD_ID)
        tokens = [int(t) for t in translator.search(source_ids).tokens[0, 0].numpy()]
        tokens = tokens[:tokens.index(EOS_ID)] if EOS_ID in tokens else tokens
        target_pieces = [tokenizer.id_to_piece(t) for t in tokens]
        target_words = re.sub(r"[.,;?!]", "", tokenizer.detokenize(
            tf.constant(tokens + [EOS_ID], tf.int32)).numpy().decode("utf-8").lower()).split()
        position = next((m for m in range(len(target_words) - 1) if target_words[m:m + 2]
                         == [adjective_en, noun_en]), None)
        if position is None:
            continue
        counted += 1
        source_words = word_of_pieces(
            [tokenizer.id_to_piece(int(i)) for i in source_ids[0].numpy()[:-1]])
        piece_words = word_of_pieces(target_pieces)
        first = {word: piece_words.index(word) for word in (position, position + 1)}
        weights = model.attention_weights(
            source_ids, tf.constant([[BOS_ID] + tokens], tf.int32))["decoder_cross"]
        for layer, layer_weights in enumerate(weights):
            average = layer_weights[0].numpy().mean(axis=0)[:, :-1]  # EOS left out
            aligned = {word: source_words[int(average[j].argmax())] for word, j in first.items()}
            adjective_right = aligned[position] == adjective_word
            noun_right = aligned[position + 1] == noun_word
            right["adjective"][layer] += adjective_right
            right["noun"][layer] += noun_right
            right["crossing"][layer] += adjective_right and noun_right
    if counted == 0:
        print("no translation holds its phrase: train longer (--minutes)", file=sys.stderr)
        return 1
    print(json.dumps({
        "command": " ".join(["benchmarks/decoding/alignments.py", *sys.argv[1:]]),
        "machine": f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}",
        "cpu_flags": matmul_flags(),
        "tensorflow": tf.__version__,
        "train_minutes": round(train_minutes, 2),
        "updates": result.step,
        "phrases_in_test_sentences": len(cases),
        "phrases_translated_as_adjective_noun": counted,
        "layer_used_by_the_export": layers - 1,
        "right_per_decoder_layer": {kind: [round(v / counted, 3) for v in values]
                                    for kind, values in right.items()},
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

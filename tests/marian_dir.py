"""Small Hugging Face Marian directories made offline, as OPUS-MT lays them out: SentencePiece
models trained on the built-in corpus, a vocab.json (or two), and transformers' own
MarianMTModel with random weights and non-zero biases, written by `save_pretrained`."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import sentencepiece as spm

from tfformer.data.builtin.grammar import builtin_pairs

LANGUAGE_CODES = (">>fra<<", ">>deu<<", ">>spa<<")


def train_spm(sentences, vocab_size: int) -> bytes:
    """A unigram SentencePiece model as Marian trains them (<unk> 0, <s> 1, </s> 2, no pad)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    return model.getvalue()


def spm_pieces(model: bytes) -> list[str]:
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def marian_vocabulary(pieces, codes=(), dropped=(), pad_at=None) -> dict[str, int]:
    """Marian's layout: </s> 0, <unk> 1, the pieces, <pad> last (or at id `pad_at`);
    `dropped` pieces left out (SentencePiece still makes them: they become <unk>)."""
    ordered = ["</s>", "<unk>"]
    for piece in [*codes, *pieces]:
        if piece not in ordered and piece not in dropped:
            ordered.append(piece)
    ordered.insert(len(ordered) if pad_at is None else pad_at, "<pad>")
    return {piece: i for i, piece in enumerate(ordered)}


def make_marian_dir(path: str, *, activation: str = "swish", separate: bool = False,
                    multilingual: bool = False, seed: int = 0, d_model: int = 32,
                    layers: int = 2, heads: int = 4, d_ff: int = 64, vocab: int = 120,
                    safetensors: bool = True, train_steps: int = 0) -> dict:
    """Writes a Marian directory at `path`; returns {"vocab", "target_vocab", "dropped"}.

    `train_steps` > 0 trains the random model that many Adam steps on built-in pairs (biases
    stay non-zero), so that its translations end of their own accord at varied lengths, as a
    real model's do: a random one either ends every hypothesis at once or none.
    """
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    os.makedirs(path, exist_ok=True)
    pairs = builtin_pairs("train", 400)
    source = train_spm([s for s, _ in pairs], vocab)
    target = train_spm([t for _, t in pairs], vocab)
    for name, model in (("source.spm", source), ("target.spm", target)):
        with open(os.path.join(path, name), "wb") as f:
            f.write(model)
    codes = LANGUAGE_CODES if multilingual else ()
    # Two real pieces left out of the vocabulary: SentencePiece makes them, the vocabulary
    # maps them to <unk>, as a Marian vocabulary can.
    dropped = tuple(spm_pieces(source)[5:7])
    if separate:
        # One pad id for both sides (Hugging Face's config has one): the target's last id,
        # within the larger source vocabulary.
        target_vocabulary = marian_vocabulary(spm_pieces(target))
        vocabulary = marian_vocabulary(spm_pieces(source) + spm_pieces(target)[:40], codes,
                                       dropped, pad_at=target_vocabulary["<pad>"])
    else:
        vocabulary = marian_vocabulary(spm_pieces(source) + spm_pieces(target), codes, dropped)
        target_vocabulary = vocabulary
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    if separate:
        with open(os.path.join(path, "target_vocab.json"), "w", encoding="utf-8") as f:
            json.dump(target_vocabulary, f, ensure_ascii=False)
    pad = target_vocabulary["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocabulary), decoder_vocab_size=len(target_vocabulary),
        d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff, activation_function=activation,
        max_position_embeddings=128, scale_embedding=True, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=not separate, dropout=0.1, attention_dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):  # Hugging Face initializes them to zero
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
            elif "layer_norm.weight" in name:
                parameter.copy_(1 + 0.1 * torch.randn(parameter.shape, generator=generator))
        model.final_logits_bias.copy_(
            0.5 * torch.randn(model.final_logits_bias.shape, generator=generator))
    if train_steps:
        _train(model, path, pairs, separate, train_steps, seed)
    with torch.no_grad():  # decoding starts from <pad>'s row: zeros in Marian's models
        for embedding in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            embedding.weight[pad] = 0
    model.generation_config.bad_words_ids = [[pad]]
    model.save_pretrained(path)
    if not safetensors:  # the older layout, which transformers 5 no longer writes
        os.remove(os.path.join(path, "model.safetensors"))
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()
                    if "embed_positions" not in k}, os.path.join(path, "pytorch_model.bin"))
    tokenizer = MarianTokenizer(
        os.path.join(path, "source.spm"), os.path.join(path, "target.spm"),
        os.path.join(path, "vocab.json"),
        target_vocab_file=os.path.join(path, "target_vocab.json") if separate else None,
        separate_vocabs=separate)
    tokenizer.save_pretrained(path)
    return {"vocab": vocabulary, "target_vocab": target_vocabulary, "dropped": dropped}


def _train(model, path, pairs, separate, steps: int, seed: int) -> None:
    import torch
    from transformers import MarianTokenizer

    tokenizer = MarianTokenizer(
        os.path.join(path, "source.spm"), os.path.join(path, "target.spm"),
        os.path.join(path, "vocab.json"),
        target_vocab_file=os.path.join(path, "target_vocab.json") if separate else None,
        separate_vocabs=separate)
    bias = model.final_logits_bias
    model.final_logits_bias = torch.nn.Parameter(bias.clone())  # trained too, then a buffer
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(steps):
        batch = [pairs[i] for i in rng.integers(0, len(pairs), 32)]
        inputs = tokenizer([s for s, _ in batch], text_target=[t for _, t in batch],
                           return_tensors="pt", padding=True)
        labels = inputs.pop("labels")
        labels[labels == tokenizer.pad_token_id] = -100
        loss = model(**inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    trained = model.final_logits_bias.detach().clone()
    del model.final_logits_bias
    model.register_buffer("final_logits_bias", trained)


def sample_sentences(n: int = 200, seed: int = 1, codes=()) -> list[str]:
    """Built-in dev sources with unknown characters, language codes and an empty string."""
    rng = np.random.default_rng(seed)
    sources = [s for s, _ in builtin_pairs("dev", n)]
    odd = ["", "  ", "Hola ☃ mundo", "¿Qué? — «sí» ✓", "Zebra ĳ xylophone", "日本語のテキスト"]
    sentences = odd + sources[:n - len(odd)]
    if codes:
        sentences = [f"{codes[i % len(codes)]} {s}" if rng.random() < 0.5 else s
                     for i, s in enumerate(sentences)]
        sentences[-1] = ">>xxx<< unknown code"
        sentences[-2] = ">>fra<<sin espacio"
    return sentences


if __name__ == "__main__":
    # A small OPUS-MT-like directory for the docs' commands (tests/test_docs.py):
    # python tests/marian_dir.py DIR
    import sys

    make_marian_dir(sys.argv[1], multilingual=True, vocab=400, train_steps=100)

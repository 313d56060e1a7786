"""The Transformer (Vaswani et al. 2017, Figure 1) as a `keras.Model`."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfformer.config import TransformerConfig

# losses and schedule: their classes are registered with Keras here, so that the .keras file of
# a compiled model (whose compile config names the loss, metrics and learning-rate schedule)
# loads wherever the Transformer can.
from tfformer.model import (
    compat,  # noqa: F401
    )
from tfformer.model.layers import (
    Decoder,
    Encoder,
    SharedEmbedding,
    causal_mask,
    padding_mask,
    segment_mask,
    segment_positions,
)
from tfformer.special_tokens import PAD_ID


def _stack_kwargs(config: TransformerConfig, num_layers: int) -> dict[str, Any]:
    return dict(num_layers=num_layers, d_model=config.d_model, num_heads=config.num_heads,
                d_ff=config.d_ff, dropout=config.dropout,
                attention_dropout=config.attention_dropout, norm=config.norm,
                epsilon=config.layer_norm_epsilon, positional=config.positional,
                max_length=config.max_length, activation=config.activation,
                sinusoid_layout=config.sinusoid_layout)


@keras.saving.register_keras_serializable(package="tfformer")
class Transformer(compat.TrainerFixes, keras.Model):
    """Encoder-decoder Transformer with one shared vocabulary and tied embeddings (§3, §3.4).

    Args:
        config: a `TransformerConfig` or its dict form.

    Call arguments:
        inputs: tuple (source_ids, target_in_ids), int tensors [batch, S] and [batch, T], padded
            with PAD_ID (0), which is masked everywhere. target_in_ids starts with BOS.
            Or, for rows packed with several pairs (`tfformer.data.packing`), the tuple
            (source_ids, target_in_ids, source_segment_ids, target_segment_ids): pair i of a
            row has segment id i (from 1) on both sides, PAD has 0; a token attends only to its
            own pair, and positions (§3.5) restart at each pair. The logits of a packed row are
            those of its pairs computed one by one.
        training: whether dropout is active.

    Returns:
        logits [batch, T, vocab_size] (float32, also under mixed precision) predicting the
        target shifted left (target_out_ids).

    For search, `encode` runs the encoder once and `decode` runs the decoder on all target
    positions (no cache) or on new positions only (with the cache from `init_cache`).
    """

    def __init__(self, config: TransformerConfig | dict, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        self.transformer_config = config
        # One matrix: source embedding, target embedding and pre-softmax projection (§3.4).
        self.embedding = SharedEmbedding(config.vocab_size, config.d_model,
                                         logits_bias=config.final_logits_bias, name="embedding")
        self.source_embedding = None if config.share_embeddings else SharedEmbedding(
            config.source_vocabulary_size, config.d_model, name="source_embedding")
        self.encoder = Encoder(**_stack_kwargs(config, config.num_encoder_layers), name="encoder")
        self.decoder = Decoder(**_stack_kwargs(config, config.num_decoder_layers), name="decoder")

    def build(self, input_shape=None):
        hidden_shape = (None, None, self.transformer_config.d_model)
        self.embedding.build((None, None))
        if self.source_embedding is not None:
            self.source_embedding.build((None, None))
        self.encoder.build(hidden_shape)
        self.decoder.build(hidden_shape, hidden_shape)
        self.built = True

    @staticmethod
    def _check_ids(ids, name: str):
        ids = ops.convert_to_tensor(ids)
        if len(ids.shape) != 2:
            raise ValueError(
                f"{name} must be a rank-2 integer tensor [batch, length] of token ids, got "
                f"shape {tuple(ids.shape)}")
        dtype = keras.backend.standardize_dtype(ids.dtype)
        if "int" not in dtype:
            raise ValueError(f"{name} must be an integer tensor of token ids, got dtype {dtype}")
        return ops.cast(ids, "int32")

    def call(self, inputs, training=None):
        if not isinstance(inputs, (tuple, list)) or len(inputs) not in (2, 4):
            raise ValueError(
                "Transformer expects inputs=(source_ids, target_in_ids), or (source_ids, "
                "target_in_ids, source_segment_ids, target_segment_ids) for packed rows, got "
                f"{type(inputs).__name__}" + (f" of {len(inputs)}" if isinstance(
                    inputs, (tuple, list)) else ""))
        source_ids = self._check_ids(inputs[0], "source_ids")
        target_ids = self._check_ids(inputs[1], "target_in_ids")
        if len(inputs) == 4:
            return self._packed_call(source_ids, target_ids,
                                     self._check_ids(inputs[2], "source_segment_ids"),
                                     self._check_ids(inputs[3], "target_segment_ids"), training)
        memory, source_mask = self.encode(source_ids, training=training)
        return self.decode(target_ids, memory, source_mask, training=training)

    def _packed_call(self, source_ids, target_ids, source_segments, target_segments, training):
        """Teacher forcing on rows packed with several pairs: masks and positions per pair."""
        embedding = self.source_embedding or self.embedding
        memory = self.encoder(embedding(source_ids), segment_mask(source_segments, source_segments),
                              positions=segment_positions(source_segments), training=training)
        self_mask = ops.logical_and(causal_mask(ops.shape(target_ids)[1]),
                                    segment_mask(target_segments, target_segments))
        hidden = self.decoder(self.embedding(target_ids), memory, self_mask,
                              segment_mask(target_segments, source_segments),
                              positions=segment_positions(target_segments), training=training)
        return ops.cast(self.embedding.logits(hidden), "float32")

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Runs the encoder once.

        Returns:
            (memory [batch, S, d_model], source_mask boolean [batch, 1, S]); with
            `return_attention_scores`, also the encoder's self-attention weights per layer.
        """
        if not self.built:  # search calls encode/init_cache/decode before any __call__
            self.build()
        source_mask = padding_mask(source_ids, PAD_ID)
        embedding = self.source_embedding or self.embedding
        memory = self.encoder(embedding(source_ids), source_mask,
                              return_attention_scores=return_attention_scores,
                              training=training)
        if return_attention_scores:
            memory, weights = memory
            return memory, source_mask, weights
        return memory, source_mask

    @staticmethod
    def _target_mask(target_ids):
        """The decoder self-attention mask of a whole target: causal (§3.2.3) and padding."""
        return ops.logical_and(causal_mask(ops.shape(target_ids)[1]),
                               padding_mask(target_ids, PAD_ID))

    def attention_weights(self, source_ids, target_in_ids) -> dict[str, list]:
        """Every attention weight of one teacher-forced pass, for inspection and plots.

        The same layers and weights as `call`, asked for their weights by a Python flag, so
        the graphs traced for training (`call`), search and export neither compute nor
        return them.

        Args:
            source_ids: int [batch, S], EOS-terminated, PAD-padded.
            target_in_ids: int [batch, T], BOS first, PAD-padded.

        Returns:
            {"encoder_self": N x [batch, h, S, S], "decoder_self": N x [batch, h, T, T],
             "decoder_cross": N x [batch, h, T, S]}: one tensor per layer, rows (queries) sum
            to 1, zero weight on masked keys.
        """
        target_ids = self._check_ids(target_in_ids, "target_in_ids")
        memory, source_mask, encoder_weights = self.encode(
            self._check_ids(source_ids, "source_ids"), return_attention_scores=True)
        _, decoder_weights = self.decoder(self.embedding(target_ids), memory,
                                          self._target_mask(target_ids), source_mask,
                                          return_attention_scores=True)
        return {"encoder_self": encoder_weights,
                "decoder_self": [layer["self"] for layer in decoder_weights],
                "decoder_cross": [layer["cross"] for layer in decoder_weights]}

    def init_cache(self, memory, capacity: int | None = None):
        """The decoder cache before the first step: cross-attention keys/values computed once;
        self-attention grown by each step, or of a fixed `capacity` (see `decode`)."""
        if not self.built:
            self.build()
        return self.decoder.init_cache(memory, capacity)

    def reorder_cache(self, cache, rows):
        """The decoder cache of the rows `rows` (see `Decoder.reorder_cache`)."""
        return self.decoder.reorder_cache(cache, rows)

    def decode(self, target_ids, memory, source_mask, cache=None, cache_index=None,
               training=None, projection=None):
        """Decoder + pre-softmax projection.

        Args:
            target_ids: [batch, T] int ids: the whole target input (no cache) or only the new
                positions (with a cache).
            memory: encoder output from `encode` (unused with a cache).
            source_mask: from `encode`.
            cache: None, or from `init_cache` / the previous `decode` call.
            cache_index: for a fixed-capacity cache (`init_cache(memory, capacity)`), the
                position of target_ids' first token; every step then has the same shapes (what
                JAX compiles once). None for a cache grown by each call (TensorFlow's search and
                the SavedModel: no XlaDynamicUpdateSlice).
            projection: the pre-softmax projection as `SharedEmbedding.projection()` gives it,
                computed once by a decoding loop; None: from the embedding matrix as it is.

        Returns:
            logits [batch, T, vocab] (float32), plus the grown cache when `cache` was given.
        """
        embeddings = self.embedding(target_ids)
        if cache is None:
            hidden = self.decoder(embeddings, memory, self._target_mask(target_ids), source_mask,
                                  training=training)
            return ops.cast(self.embedding.logits(hidden, projection), "float32")
        new_length = ops.shape(target_ids)[1]
        if cache_index is not None:  # the unwritten positions of the capacity are hidden too
            self_mask = causal_mask(new_length, self.decoder.cached_length(cache), cache_index)
        elif target_ids.shape[1] == 1:
            self_mask = None  # one new position sees every cached one: nothing to mask
        else:
            self_mask = causal_mask(new_length, self.decoder.cached_length(cache) + new_length)
        hidden, cache = self.decoder(embeddings, memory, self_mask, source_mask, cache=cache,
                                     cache_index=cache_index, training=training)
        return ops.cast(self.embedding.logits(hidden, projection), "float32"), cache

    def get_config(self):
        return {**super().get_config(), "config": self.transformer_config.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

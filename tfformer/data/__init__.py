"""The data's way, one stage a module, each using only the ones above it:

* `sources`: data specs, the TSV / TFDS / built-in readers and their line rules (`read_tsv` is
  the one TSV reader), `DataError`;
* `builtin`: the synthetic Spanish→English corpus (`vocabulary` tables, `grammar`);
* `scan`: the one ordered pass over the training side (counts, held-out dev, vocabulary sample);
* `buckets` (no TensorFlow): the grid of batch shapes and the rows per bucket;
* `packing`: several pairs per row of a fixed length, with segment ids (one batch shape);
* `batching`: tokenized in the graph, the token budget, the length-bucketed (or packed)
  `tf.data` batches;
* `run_data`: what one training run trains and validates on.

Import the stage you use (`from tfformer.data.batching import make_dataset`): this package
itself imports nothing, so that `tfformer.data.buckets` and `tfformer.data.builtin` serve
where TensorFlow is not installed.
"""

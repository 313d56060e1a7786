"""The data's way, one stage a module, each using only the ones above it:

* `sources`: data specs, the TSV / TFDS / built-in readers and their line rules (`read_tsv` is
  the one TSV reader), `DataError`;
* `builtin`: the synthetic Spanish→English corpus (`vocabulary` tables, `grammar`);
* `scan`: the one ordered pass over the training side (counts, held-out dev, vocabulary sample);
* `buckets` (no TensorFlow) and `batching`: the grid of batch shapes, the token budget, the
  length-bucketed `tf.data` batches;
* `run_data`: what one training run trains and validates on.

Import the stage you use (`from tfformer.data.batching import make_dataset`): this package
itself imports nothing, so that `tfformer.data.buckets` and `tfformer.data.builtin` serve
where TensorFlow is not installed.
"""

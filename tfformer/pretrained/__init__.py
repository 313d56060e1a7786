"""Readers of other toolkits' checkpoints into a tfformer run directory, one module per family
(`marian`: a Hugging Face Marian / OPUS-MT directory)."""

"""Serving the exported tfformer SavedModel: a local TF Serving stand-in and a gRPC client."""

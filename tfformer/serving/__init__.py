"""Serving the exported model: the SavedModel contract, a local TF Serving stand-in, clients.

Modules, each with one job (as in TF Serving's own source), all bound by `tfformer.contract`
(signature and tensor names, the version-directory rule: defined once):
`versions` (finding, loading and hot-swapping versions), `requests` (validating a Predict
request and converting tensors), `service` (the gRPC servicers), `rest` (TF Serving's REST
API over them), `server` (starting and stopping both), `client` (calling it, or a SavedModel
in process), `protos` (TF Serving's protos and tensors for the client, without TensorFlow).
"""

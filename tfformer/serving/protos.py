"""TF Serving's generated protos, and tensors in them, without running TensorFlow's ``__init__``.

Why stand-in packages: the generated modules import ``tensorflow.core.framework.*_pb2`` by that
name, which Python cannot import without running ``tensorflow/__init__.py`` (seconds), and our
own generated copies would register the same .proto files a second time in protobuf's pool once
TensorFlow is imported (an error), so a client that starts fast has no third way.

The generated modules of tensorflow-serving-api import TensorFlow's own
(``tensorflow.core.framework.tensor_pb2``, ...), which live inside the ``tensorflow`` package,
so importing them the ordinary way runs ``tensorflow/__init__.py``: seconds of a gRPC client's
start, for a few protobuf classes. Here they are imported while placeholder modules (empty
packages whose ``__path__`` is the real directory) stand in for ``tensorflow`` and its
subpackages. The placeholders are then taken out of ``sys.modules`` again and only the generated
modules stay, so that a later ``import tensorflow`` runs the real package, which reuses them: one
protobuf descriptor pool, the very same message classes (``tf.make_tensor_proto`` returns a
``tensor_pb2.TensorProto`` that ``PredictRequest.inputs`` takes). Once TensorFlow is imported,
everything is imported the ordinary way.

Importing this module while another thread imports TensorFlow for the first time is not
supported: that thread could see a placeholder.

``tensor_proto`` and ``make_ndarray`` convert tensors as ``tf.make_tensor_proto`` and
``tf.make_ndarray`` do, for the dtypes a client sends and reads.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Iterable, Sequence

import numpy as np

from tfformer.utils.imports import on_import

_TENSORFLOW = "tensorflow"


class _PlaceholderPackages:
    """Imports ``tensorflow`` and its subpackages as empty packages (their ``__init__`` is not
    run) with the real ``__path__``, so that their plain modules import as usual."""

    def __init__(self, locations: list[str]):
        self._locations = locations

    def find_spec(self, fullname, path=None, target=None):
        if fullname == _TENSORFLOW:
            locations = self._locations
        elif fullname.startswith(_TENSORFLOW + "."):
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.submodule_search_locations is None:
                return None  # a module (a *_pb2): the ordinary finders import it
            locations = list(spec.submodule_search_locations)
        else:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        spec.submodule_search_locations = locations
        return spec

    def create_module(self, spec):
        return None  # a plain module, its __path__ from the spec

    def exec_module(self, module):
        pass

    def is_placeholder(self, module: Any) -> bool:
        return getattr(getattr(module, "__spec__", None), "loader", None) is self


def _set_children(children: dict[str, types.ModuleType], package: types.ModuleType) -> None:
    """Sets generated modules that stayed in ``sys.modules`` as attributes of their real package,
    before it runs: Python sets a submodule on its parent only when it loads the submodule, and
    ``tensorflow.core.framework.tensor_pb2`` is not loaded again."""
    for name, child in children.items():
        setattr(package, name, child)


def import_protos(*names: str) -> list[types.ModuleType]:
    """The modules ``names`` (generated protos of tensorflow-serving-api or of TensorFlow),
    imported without running TensorFlow's ``__init__`` when TensorFlow is not imported yet."""
    if _TENSORFLOW in sys.modules:
        return [importlib.import_module(name) for name in names]
    spec = importlib.util.find_spec(_TENSORFLOW)  # a top-level name: finds, imports nothing
    if spec is None or not spec.submodule_search_locations:
        return [importlib.import_module(name) for name in names]  # the ordinary ImportError
    placeholders = _PlaceholderPackages(list(spec.submodule_search_locations))
    sys.meta_path.insert(0, placeholders)
    try:
        return [importlib.import_module(name) for name in names]
    finally:
        sys.meta_path.remove(placeholders)
        packages = {name for name, module in list(sys.modules.items())
                    if placeholders.is_placeholder(module)}
        for name in packages:
            del sys.modules[name]
        children: dict[str, dict[str, types.ModuleType]] = {}
        for name, module in list(sys.modules.items()):
            parent, _, child = name.rpartition(".")
            if parent in packages and module is not None \
                    and not placeholders.is_placeholder(module):
                children.setdefault(parent, {})[child] = module
        for parent, modules in children.items():
            on_import(parent, before=functools.partial(_set_children, modules))


(predict_pb2, prediction_service_pb2_grpc, tensor_pb2, tensor_shape_pb2,
 types_pb2) = import_protos(
    "tensorflow_serving.apis.predict_pb2", "tensorflow_serving.apis.prediction_service_pb2_grpc",
    "tensorflow.core.framework.tensor_pb2", "tensorflow.core.framework.tensor_shape_pb2",
    "tensorflow.core.framework.types_pb2")

# --------------------------------------------------------------------------------------------
# Tensors

# DataType -> (numpy dtype, the TensorProto field of its values), as tf.make_ndarray reads them.
_NUMPY_AND_FIELD = {
    types_pb2.DT_STRING: (np.object_, "string_val"),
    types_pb2.DT_FLOAT: (np.float32, "float_val"),
    types_pb2.DT_DOUBLE: (np.float64, "double_val"),
    types_pb2.DT_HALF: (np.float16, "half_val"),
    types_pb2.DT_INT32: (np.int32, "int_val"),
    types_pb2.DT_INT16: (np.int16, "int_val"),
    types_pb2.DT_INT8: (np.int8, "int_val"),
    types_pb2.DT_UINT8: (np.uint8, "int_val"),
    types_pb2.DT_UINT16: (np.uint16, "int_val"),
    types_pb2.DT_INT64: (np.int64, "int64_val"),
    types_pb2.DT_UINT32: (np.uint32, "uint32_val"),
    types_pb2.DT_UINT64: (np.uint64, "uint64_val"),
    types_pb2.DT_BOOL: (np.bool_, "bool_val"),
}


def string_tensor(values: Sequence[bytes]) -> Any:
    """A DT_STRING vector of ``values``, as ``tf.make_tensor_proto(values, tf.string,
    [len(values)])``."""
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=values)
    tensor.tensor_shape.dim.add(size=len(values))
    return tensor


_VECTOR_DTYPES = {  # dtype name -> (enum, NumPy type, the TensorProto field)
    "int32": (types_pb2.DT_INT32, np.int32, "int_val"),
    "int64": (types_pb2.DT_INT64, np.int64, "int64_val"),
    "float32": (types_pb2.DT_FLOAT, np.float32, "float_val"),
}


def vector_tensor(values: Sequence[Any], dtype: str) -> Any:
    """A vector of numbers ("int32", "int64" or "float32"), as ``tf.make_tensor_proto(values,
    dtype, [len(values)])``; a value its dtype cannot hold raises ValueError."""
    enum, numpy_type, field = _VECTOR_DTYPES[dtype]
    if np.issubdtype(numpy_type, np.integer):
        limits = np.iinfo(numpy_type)
        for value in values:
            if not limits.min <= value <= limits.max:
                raise ValueError(f"{value} is out of the range of {dtype}")
    tensor = tensor_pb2.TensorProto(dtype=enum)
    getattr(tensor, field).extend(np.asarray(values, numpy_type).tolist())
    tensor.tensor_shape.dim.add(size=len(values))
    return tensor


def make_ndarray(tensor: Any) -> np.ndarray:
    """The values of a TensorProto as ``tf.make_ndarray`` returns them (strings as bytes): from
    ``tensor_content`` when set, else from the dtype's field, its last value repeated up to the
    shape's size (how TensorFlow stores a tensor whose last values repeat)."""
    shape = [dim.size for dim in tensor.tensor_shape.dim]
    if tensor.dtype not in _NUMPY_AND_FIELD:
        raise TypeError(f"Unsupported tensor type: {tensor.dtype}")
    dtype, field = _NUMPY_AND_FIELD[tensor.dtype]
    if tensor.tensor_content:
        return np.frombuffer(tensor.tensor_content, dtype=dtype).copy().reshape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    values: Iterable[Any] = getattr(tensor, field)
    if tensor.dtype == types_pb2.DT_STRING:
        values = list(values)
        if len(values) < count:
            values.extend([values[-1] if values else ""] * (count - len(values)))
        return np.array(values, dtype=dtype).reshape(shape)
    if tensor.dtype == types_pb2.DT_HALF:  # half_val holds the float16 bit patterns
        array = np.fromiter(values, dtype=np.uint16).view(np.float16)
    else:
        array = np.fromiter(values, dtype=dtype)
    if array.size == 0:
        return np.zeros(shape, dtype)
    if array.size != count:
        array = np.pad(array, (0, count - array.size), "edge")
    return array.reshape(shape)


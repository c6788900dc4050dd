"""Reading an .onnx file with its weights held once: `load_file(path) -> (proto, weights)`.

`onnx.load` reads the whole file into a bytes object and parses it into a proto that copies
every initializer's raw data, and turning those into numpy arrays copies them again: a 28 MB
model costs 84 MB at the peak of its import. Here the file is walked field by field in the
protobuf wire format down to the graph's initializers; the proto is parsed from everything
but their `raw_data` (the tensors keep their name, type and shape), and each raw tensor is
read from the file straight into the numpy array that becomes the constant. Tensors stored
otherwise (typed fields, external data files, element types whose bytes are not numpy's)
stay in the proto as `onnx.load` would have them.
"""
from __future__ import annotations

import os
import sys
from typing import BinaryIO

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, helper

MODEL_GRAPH = 7        # ModelProto.graph
GRAPH_INITIALIZER = 5  # GraphProto.initializer
TENSOR_RAW_DATA = 9    # TensorProto.raw_data
# element types whose raw bytes are the numpy array's (little-endian, numpy's own width)
_PLAIN = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                    onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                    onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})


def load_file(path: str | os.PathLike) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model in `path` and the arrays of its raw-data initializers by name (their protos
    keep no data). Raises DecodeError where the file is not protobuf (cut short, a field
    running past its message) and onnx's errors for external data it cannot find."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        model, raw = _strip(f, size)
        proto = onnx.ModelProto.FromString(model)
        tensors = proto.graph.initializer
        if len(tensors) != len(raw):
            raise DecodeError(f"{len(raw)} initializer fields but {len(tensors)} initializers")
        weights = {}
        for tensor, where in zip(tensors, raw):
            if where is None:
                continue
            offset, length = where
            if tensor.data_type in _PLAIN and sys.byteorder == "little":
                weights[tensor.name] = _array(f, tensor, offset, length)
            else:
                f.seek(offset)
                tensor.raw_data = f.read(length)
    # as onnx.load: tensors kept in files beside the model (a no-op for a model without them)
    external_data_helper.load_external_data_for_model(proto, os.path.dirname(os.fspath(path)))
    return proto, weights


def _strip(f: BinaryIO, size: int) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The model's bytes without its initializers' raw data, and for each initializer in
    order where its raw data lies in the file (offset, length), None where it has none."""
    out, raw = bytearray(), []
    for number, wire, start, body, end in _fields(f, 0, size):
        if number == MODEL_GRAPH and wire == 2:
            graph = bytearray()
            for gnumber, gwire, gstart, gbody, gend in _fields(f, body, end):
                if gnumber == GRAPH_INITIALIZER and gwire == 2:
                    tensor, where = bytearray(), None
                    for tnumber, twire, tstart, tbody, tend in _fields(f, gbody, gend):
                        if tnumber == TENSOR_RAW_DATA and twire == 2:
                            where = (tbody, tend - tbody)
                        else:
                            tensor += _read(f, tstart, tend)
                    graph += _key(gnumber, 2) + _varint_bytes(len(tensor)) + tensor
                    raw.append(where)
                else:
                    graph += _read(f, gstart, gend)
            out += _key(number, 2) + _varint_bytes(len(graph)) + graph
        else:
            out += _read(f, start, end)
    return bytes(out), raw


def _fields(f: BinaryIO, begin: int, end: int):
    """(number, wire type, start, body start, end) of each field of the message stored at
    file bytes [begin, end); only the keys and lengths are read."""
    pos = begin
    while pos < end:
        f.seek(pos)
        key = _varint(f)
        number, wire = key >> 3, key & 7
        body = f.tell()
        if wire == 0:
            _varint(f)
            stop = f.tell()
        elif wire == 1 or wire == 5:
            stop = body + (8 if wire == 1 else 4)
        elif wire == 2:
            length = _varint(f)
            body = f.tell()
            stop = body + length
        else:
            raise DecodeError(f"wire type {wire} of field {number} at byte {pos} is not one "
                              "protobuf writes")
        if number == 0 or stop > end:
            raise DecodeError(f"field {number} at byte {pos} runs past the end of its message "
                              f"(byte {stop} of {end})")
        yield number, wire, pos, body, stop
        pos = stop


def _varint(f: BinaryIO) -> int:
    value = shift = 0
    while True:
        byte = f.read(1)
        if not byte:
            raise DecodeError("the file ends inside a varint")
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7
        if shift > 63:
            raise DecodeError("a varint longer than 10 bytes")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint_bytes(number << 3 | wire)


def _read(f: BinaryIO, start: int, end: int) -> bytes:
    f.seek(start)
    data = f.read(end - start)
    if len(data) != end - start:
        raise DecodeError(f"the file ends at byte {start + len(data)}, inside a field")
    return data


def _array(f: BinaryIO, tensor: onnx.TensorProto, offset: int, length: int) -> np.ndarray:
    """The tensor's raw data read from the file into its own numpy array (one copy)."""
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    shape = tuple(int(d) for d in tensor.dims)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if length != expected:
        raise DecodeError(f"initializer {tensor.name!r}: {length} bytes of raw data for "
                          f"shape {shape} of {dtype} ({expected} bytes)")
    array = np.empty(shape, dtype)
    f.seek(offset)
    if array.size and f.readinto(array.reshape(-1).view(np.uint8)) != length:
        raise DecodeError(f"the file ends inside initializer {tensor.name!r}")
    return array


__all__ = ["load_file"]

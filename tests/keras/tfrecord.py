"""TFRecord files of tf.train.Example records, written without TensorFlow: what Troupe reads
by feature name (core/data/named_input.hpp). Encodes the protobuf by hand (Example ->
Features -> map<string, Feature> -> Int64List / FloatList / BytesList, packed) and frames
each record as TFRecord does (length, masked CRC32C of it, data, masked CRC32C of it).
"""

import struct

import numpy as np


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1  # negative int64 values as two's complement
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, payload):
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _feature(values):
    values = np.asarray(values).reshape(-1)
    if values.dtype.kind in "US" or values.dtype == object:
        items = b"".join(_field(1, (v.encode() if isinstance(v, str) else bytes(v)))
                         for v in values)
        return _field(1, items)  # bytes_list
    if values.dtype.kind in "iub":
        packed = b"".join(_varint(int(v)) for v in values)
        return _field(3, _field(1, packed))  # int64_list
    packed = struct.pack("<%df" % len(values), *values.astype(np.float32))
    return _field(2, _field(1, packed))  # float_list


def example(features):
    """One tf.train.Example from {name: values of one example}."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, _feature(v)))
                       for name, v in features.items())
    return _field(1, entries)


def write(path, columns):
    """Writes one record per row of {name: array [n, ...]}."""
    n = len(next(iter(columns.values())))
    with open(path, "wb") as f:
        for i in range(n):
            data = example({k: v[i] for k, v in columns.items()})
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", _masked(length)) + data +
                    struct.pack("<I", _masked(data)))

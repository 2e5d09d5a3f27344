"""The rows a Delta deletion vector marks as deleted in its data file, read by the driver.

A DELETE on a table with deletion vectors rewrites no data file: its commit removes the file and adds it
back with a larger vector, and the change data feed's deleted rows are the rows in the new vector that
were not in the old one. Reading the vectors here lets the driver take exactly those rows from the file
(driver_files.change_rows) where Spark would plan and run a read of the whole file.

A vector's descriptor (the `deletionVector` of an add or remove action) says where it is stored:
- `u`: in a file of the table's folder, `<prefix>/deletion_vector_<uuid>.bin`, the prefix and the UUID
  (Z85-encoded, the last 20 characters) given by `pathOrInlineDv`;
- `p`: in the file at the absolute path `pathOrInlineDv`;
- `i`: inline, Z85-encoded in `pathOrInlineDv`.
A file holds, at the descriptor's `offset`, the vector's size (4 bytes, big-endian), the vector, and its
CRC-32. The vector is a RoaringBitmapArray in its portable form: a magic number (4 bytes, little-endian),
then the 64-bit portable Roaring format that pyroaring reads.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from urllib.parse import unquote, urlparse

from pyroaring import BitMap64

_PORTABLE_MAGIC = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {c: i for i, c in enumerate(_Z85)}


class UnreadableVector(Exception):
    """A deletion vector the driver does not read (not on this machine, another format, corrupt)."""


def deleted_rows(folder: str, descriptor: dict | None) -> BitMap64:
    """The row indexes (positions in the data file) the vector marks as deleted; none for no vector.
    Raises UnreadableVector where the driver cannot read it."""
    if not descriptor:
        return BitMap64()
    kind, where = descriptor.get("storageType"), descriptor.get("pathOrInlineDv", "")
    size = int(descriptor.get("sizeInBytes", 0))
    if kind == "i":
        serialized = _z85_decode(where)[:size]
    elif kind in ("u", "p"):
        serialized = _stored(_vector_file(folder, kind, where), int(descriptor.get("offset") or 0), size)
    else:
        raise UnreadableVector(f"storage type {kind!r}")
    if len(serialized) < 4 or struct.unpack_from("<i", serialized)[0] != _PORTABLE_MAGIC:
        raise UnreadableVector("not a portable RoaringBitmapArray")
    try:
        rows = BitMap64.deserialize(serialized[4:])
    except (ValueError, OverflowError) as error:
        raise UnreadableVector(str(error)) from error
    if "cardinality" in descriptor and len(rows) != int(descriptor["cardinality"]):
        raise UnreadableVector("cardinality differs from the descriptor's")
    return rows


def _vector_file(folder: str, kind: str, where: str) -> str:
    if kind == "p":
        url = urlparse(where)
        if url.scheme not in ("", "file"):
            raise UnreadableVector(f"not on this machine: {where}")
        return unquote(url.path)
    if len(where) < 20:
        raise UnreadableVector(f"malformed path {where!r}")
    name = f"deletion_vector_{uuid.UUID(bytes=_z85_decode(where[-20:]))}.bin"
    return os.path.join(folder, where[:-20], name)


def _stored(path: str, offset: int, size: int) -> bytes:
    try:
        with open(path, "rb") as stored:
            stored.seek(offset)
            header = stored.read(4)
            data = stored.read(size)
            checksum = stored.read(4)
    except OSError as error:
        raise UnreadableVector(str(error)) from error
    if len(header) < 4 or struct.unpack(">i", header)[0] != size or len(data) < size or len(checksum) < 4:
        raise UnreadableVector(f"{path}: no vector of {size} bytes at {offset}")
    if struct.unpack(">I", checksum)[0] != zlib.crc32(data):
        raise UnreadableVector(f"{path}: checksum mismatch at {offset}")
    return data


def _z85_decode(text: str) -> bytes:
    """Z85 (the Base85 alphabet Delta encodes vectors and their file names in): 5 characters per 4 bytes."""
    if len(text) % 5:
        raise UnreadableVector(f"Z85 text of {len(text)} characters")
    decoded = bytearray()
    try:
        for start in range(0, len(text), 5):
            value = 0
            for character in text[start:start + 5]:
                value = value * 85 + _Z85_VALUES[character]
            decoded += value.to_bytes(4, "big")
    except (KeyError, OverflowError) as error:
        raise UnreadableVector("not Z85") from error
    return bytes(decoded)

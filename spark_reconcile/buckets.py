"""Spark-compatible bucketing of the export by transaction id, so the reconciliation's view of
the day needs no exchange: Spark reads each bucket of the messages and of the transactions in
one task and knows both are hash-partitioned the same way.

Spark reads a bucketed layout only through a catalog table (``CLUSTERED BY ... INTO N
BUCKETS``), and only if the files are laid out as its own writer lays them out:

* a row goes to bucket ``pmod(murmur3(value, seed 42), N)`` -- the partition id of Spark's
  ``HashPartitioning``, whose string hash is ``Murmur3_x86_32.hashUnsafeBytes`` over the UTF-8
  bytes: four-byte little-endian words, then each trailing byte mixed on its own as a signed
  byte (not the reference Murmur3's tail), then the final mix with the length; a NULL keeps the
  seed;
* the bucket id is the file name's last ``_`` followed by digits (``part-00000_00003.parquet``).

``bucket_ids`` computes the first with NumPy for ``halfmq export`` (pyarrow, no Spark);
``bench/reconcile/buckets_check.py`` compares it with Spark's own ``hash`` and checks the
view's plan.  Each bucketed day partition holds a
marker (``MARKER``) saying the column and the number of buckets, so the job reads a bucketed
table only where every day it reads was written so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

SEED = 42  # Spark's Murmur3Hash seed, the one HashPartitioning and bucketing use
COLUMN = "transaction_id"
BUCKETED = ("messages", "transactions")  # the view's two inputs
MARKER = "_bucketing.json"  # Spark's file listing skips names starting with "_"

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray) -> np.ndarray:
    h1 = h1 ^ length
    h1 ^= h1 >> np.uint32(16)
    h1 *= np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 *= np.uint32(0xC2B2AE35)
    h1 ^= h1 >> np.uint32(16)
    return h1


def spark_hash(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Spark's ``hash(value)`` (Murmur3, seed 42) of each string, as int32."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    values = values.cast(pa.large_string())
    n = len(values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    offsets_buf, data_buf = values.buffers()[1], values.buffers()[2]
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[values.offset : values.offset + n + 1]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    start = offsets[:-1]
    length = (offsets[1:] - start).astype(np.int64)
    length[~valid] = 0
    h1 = np.full(n, SEED, dtype=np.uint32)
    words = length // 4
    for w in range(int(words.max()) if n else 0):
        rows = np.nonzero(words > w)[0]
        at = start[rows] + 4 * w
        k1 = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << np.uint32(8))
            | (data[at + 2].astype(np.uint32) << np.uint32(16))
            | (data[at + 3].astype(np.uint32) << np.uint32(24))
        )
        h1[rows] = _mix_h1(h1[rows], _mix_k1(k1))
    for t in range(3):  # the tail: each byte alone, sign-extended as Java's byte
        rows = np.nonzero(length % 4 > t)[0]
        at = start[rows] + 4 * words[rows] + t
        k1 = data[at].astype(np.int8).astype(np.int32).astype(np.uint32)
        h1[rows] = _mix_h1(h1[rows], _mix_k1(k1))
    hashed = _fmix(h1, length.astype(np.uint32))
    hashed[~valid] = SEED  # a NULL is not hashed: the seed stays
    return hashed.view(np.int32)


def bucket_ids(values: pa.Array | pa.ChunkedArray, buckets: int) -> np.ndarray:
    """The bucket of each value: ``pmod(hash(value), buckets)``, as Spark's writer and reader
    compute it."""
    return np.mod(spark_hash(values).astype(np.int64), buckets)


def file_name(bucket: int, part: int = 0) -> str:
    """A bucket's file as Spark's writer names it (``BucketingUtils.bucketIdToString``)."""
    return f"part-{part:05d}_{bucket:05d}.parquet"


def split(batch: pa.RecordBatch, buckets: int) -> dict[int, pa.RecordBatch]:
    """``batch``'s rows per bucket of their transaction id."""
    ids = bucket_ids(batch.column(COLUMN), buckets)
    return {int(b): batch.filter(pa.array(ids == b)) for b in np.unique(ids)}


def write_marker(directory: Path, buckets: int) -> None:
    (directory / MARKER).write_text(json.dumps({"column": COLUMN, "buckets": buckets}))


def read_marker(directory: Path) -> int | None:
    """The number of buckets a day partition was written in, None if it is not bucketed."""
    try:
        marker = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("column") != COLUMN or not isinstance(marker.get("buckets"), int):
        return None
    return int(marker["buckets"])

"""A small HTTP/1.1 keep-alive load generator on raw asyncio streams (cheap per request, so the
broker, not the client, is what a run measures).  Used by the benchmarks only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader = reader
        self.writer = writer
        self.host = host

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(
        self,
        method: str,
        path: str,
        body: object = None,
        sign: Callable[[str, str, bytes], dict[str, str]] | None = None,
    ) -> tuple[int, bytes]:
        """``sign(method, path, payload)``: extra headers (the ACL's signature) for this request."""
        payload = b"" if body is None else orjson.dumps(body)
        extra = "".join(
            f"{k}: {v}\r\n" for k, v in (sign(method, path, payload) if sign else {}).items()
        )
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{extra}"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        self.writer.write(head.encode() + payload)
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        data = await self.reader.readexactly(length) if length else b""
        return status, data

    def close(self) -> None:
        self.writer.close()


@dataclass
class Result:
    name: str
    operations: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    # What ``probe`` (e.g. the server's CPU seconds) moved by during the measured window.
    probed: float | None = None

    @property
    def rate(self) -> float:
        return self.operations / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


Operation = Callable[[Connection, int], Awaitable[int]]


async def run(
    name: str,
    host: str,
    port: int,
    operation: Operation,
    *,
    connections: int = 64,
    seconds: float = 5.0,
    warmup: float = 1.0,
    probe: Callable[[], float] | None = None,
) -> Result:
    """Run ``operation`` (returns how many operations it did) on every connection until time is up;
    count only what completes after the warm-up.  ``probe`` is read at the start and the end of the
    measured window (``Result.probed``: the difference)."""
    conns = [await Connection.open(host, port) for _ in range(connections)]
    result = Result(name, 0, 0.0)
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + seconds

    async def worker(conn: Connection, n: int) -> None:
        i = 0
        while True:
            began = time.perf_counter()
            if began >= stop_at:
                return
            try:
                done = await operation(conn, n * 1_000_000 + i)
            except (ValueError, OSError, asyncio.IncompleteReadError):
                result.errors += 1
                return
            i += 1
            ended = time.perf_counter()
            if began >= measure_from and ended <= stop_at:
                result.operations += done
                result.latencies.append(ended - began)

    async def window(read: Callable[[], float]) -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        first = read()
        await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
        result.probed = read() - first

    tasks = [worker(c, n) for n, c in enumerate(conns)]
    if probe is not None:
        tasks.append(window(probe))
    await asyncio.gather(*tasks)
    result.seconds = seconds
    for conn in conns:
        conn.close()
    return result

"""The embedded peer for make bench-durable: SlateDB (its Python binding,
`pip install slatedb`) on the same MinIO, durable puts of random keys from
THREADS concurrent writers for SECONDS, with its WAL flush interval set to
FLUSH (default 2ms: every write within that window goes into one PUT).

  python durable-peer.py URL THREADS SECONDS [FLUSH]

Environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION (AWS_ALLOW_HTTP is set here). Prints one JSON object with the
process's own CPU per op (utime+stime over the run).
"""
import asyncio
import json
import os
import random
import sys
import time

os.environ.setdefault("AWS_ALLOW_HTTP", "true")
os.environ.setdefault("AWS_ENDPOINT", os.environ.get("AWS_ENDPOINT_URL", ""))

from slatedb.uniffi import DbBuilder, ObjectStore, Settings  # noqa: E402


def key(i):
    return b"%020d" % i


def value(rng):
    # 400 bytes compressible to about half, like shale bench's.
    return rng.randbytes(200) + bytes(200)


async def fillsync(url, threads, seconds, flush):
    scheme, rest = url.split("://", 1)
    bucket, _, path = rest.partition("/")
    store = ObjectStore.resolve(f"{scheme}://{bucket}")
    settings = Settings.default()
    settings.set("flush_interval", json.dumps(flush))
    b = DbBuilder(path or "peer", store)
    b.with_settings(settings)
    db = await b.build()
    lat = []

    async def worker(seed, deadline):
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            t = time.monotonic()
            # put waits until the write is durable in the store (SlateDB's
            # default write options: await_durable).
            await db.put(key(rng.randrange(100_000)), value(rng))
            lat.append(time.monotonic() - t)

    # One second of warm-up, not counted.
    await asyncio.gather(*(worker(-1 - i, time.monotonic() + 1) for i in range(threads)))
    lat.clear()
    cpu0 = time.process_time()
    start = time.monotonic()
    await asyncio.gather(*(worker(i, start + seconds) for i in range(threads)))
    secs = time.monotonic() - start
    cpu = time.process_time() - cpu0
    await db.shutdown()
    lat.sort()
    n = len(lat)
    print(json.dumps({"name": "fillsync", "threads": threads, "ops": n, "opsPerSec": n / secs,
                      "p50": lat[n // 2] * 1e6 if n else 0, "p99": lat[n * 99 // 100] * 1e6 if n else 0,
                      "clientCpuMicrosPerOp": cpu / n * 1e6 if n else 0, "flushInterval": flush}))


if __name__ == "__main__":
    asyncio.run(fillsync(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
                         sys.argv[4] if len(sys.argv) > 4 else "2ms"))

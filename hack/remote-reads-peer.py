"""The embedded peer for make bench-remote-reads: SlateDB (its Python
binding, `pip install slatedb`) on the same MinIO, same pairs, random
reads with a block cache of the same size.

  python remote-reads-peer.py load URL NUM
  python remote-reads-peer.py readrandom URL NUM CACHE_BYTES SECONDS THREADS

Environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION (AWS_ALLOW_HTTP is set here). Prints one JSON object.
"""
import asyncio
import json
import os
import random
import sys
import time

os.environ.setdefault("AWS_ALLOW_HTTP", "true")
os.environ.setdefault("AWS_ENDPOINT", os.environ.get("AWS_ENDPOINT_URL", ""))

from slatedb.uniffi import DbBuilder, DbCache, MokaCacheOptions, ObjectStore, WriteBatch  # noqa: E402


def key(i):
    return b"%020d" % i


def value(rng):
    # 400 bytes compressible to about half, like shale bench's.
    half = rng.randbytes(200)
    return half + bytes(200)


def open_store(url):
    # SlateDB resolves the bucket; the path inside it goes to the builder.
    scheme, rest = url.split("://", 1)
    bucket, _, path = rest.partition("/")
    return ObjectStore.resolve(f"{scheme}://{bucket}"), path or "peer"


async def load(url, num):
    store, path = open_store(url)
    db = await DbBuilder(path, store).build()
    rng = random.Random(1)
    start = time.monotonic()
    pending = []
    for lo in range(0, num, 1000):
        b = WriteBatch()
        for i in range(lo, min(lo + 1000, num)):
            b.put(key(i), value(rng))
        # Many batches in flight: each write waits for its WAL upload.
        pending.append(asyncio.ensure_future(db.write(b)))
        if len(pending) >= 64:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    await db.flush()
    secs = time.monotonic() - start
    await db.shutdown()
    print(json.dumps({"name": "load", "ops": num, "opsPerSec": num / secs}))


async def readrandom(url, num, cache, seconds, threads):
    store, path = open_store(url)
    b = DbBuilder(path, store)
    b.with_db_cache(DbCache.new_moka_cache(MokaCacheOptions(max_capacity=cache, time_to_live=None, time_to_idle=None)), 1)
    db = await b.build()
    deadline = time.monotonic() + seconds
    lat = []
    found = 0

    async def worker(seed):
        nonlocal found
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            t = time.monotonic()
            v = await db.get(key(rng.randrange(num)))
            lat.append(time.monotonic() - t)
            found += v is not None

    start = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(threads)))
    secs = time.monotonic() - start
    await db.shutdown()
    lat.sort()
    print(json.dumps({"name": "readrandom", "threads": threads, "ops": len(lat), "found": found,
                      "opsPerSec": len(lat) / secs,
                      "p50": lat[len(lat) // 2] * 1e6 if lat else 0,
                      "p99": lat[len(lat) * 99 // 100] * 1e6 if lat else 0}))


if __name__ == "__main__":
    cmd, url, num = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "load":
        asyncio.run(load(url, num))
    else:
        asyncio.run(readrandom(url, num, int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])))

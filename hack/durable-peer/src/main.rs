//! durable-peer: the embedded peer of Shale's durable-write benchmark
//! (hack/bench-durable.sh), SlateDB on the same MinIO, in Rust.
//!
//! It does what hack/durable-peer.py does with SlateDB's Python binding, but
//! without the ~600 µs of Python CPU per put that held that peer back:
//!
//!   durable-peer URL THREADS SECONDS [FLUSH [BATCH]]
//!
//! URL is s3://bucket/path (the database lives under path, "peer" if none).
//! THREADS concurrent writer tasks on a multi-threaded tokio runtime each put
//! random keys (`format!("{:020}", n)`, n uniform in 0..100000, 20 bytes) with
//! 400-byte values (200 random bytes, then 200 zero bytes: compressible to
//! about half, like shale bench's), and each put waits until the write is
//! durable in the object store (`db.put(..).await?.await_durable().await`, the
//! slatedb 0.18 API; `WriteOptions { await_durable }` of older releases is
//! gone). FLUSH is SlateDB's WAL `flush_interval` (default 2ms): every write
//! within that window goes into one PUT. One second of warm-up is not
//! counted; then SECONDS are measured and one JSON line is printed:
//!
//!   {"name":"fillsync","threads":T,"ops":N,"opsPerSec":..,"p50":µs,"p99":µs,
//!    "clientCpuMicrosPerOp":..,"flushInterval":"2ms"}
//!
//! p50 and p99 are put latencies in microseconds; clientCpuMicrosPerOp is the
//! process's user+system CPU time (getrusage, every thread) over the measured
//! part, divided by the ops.
//!
//! With BATCH N > 0 it is the embedded load of `shale bench fillrandom
//! --batch N` instead ("fillbatch"): each writer writes WriteBatches of N
//! puts of the same keys and values and does not wait for durability
//! (SlateDB acknowledges a write once it is in its WAL buffer and memtable,
//! as Shale's sync=false writes are acknowledged once in RocksDB's WAL and
//! memtable). ops count keys, latencies are per batch; "flushMicros" is the
//! `Db::flush` after the measured part, which makes every write durable
//! (not counted in opsPerSec).
//!
//! Environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//! AWS_REGION (object_store reads every AWS_* variable; plain HTTP is allowed
//! here, for a MinIO on loopback).
//!
//! Build (release, from the locked dependency versions; the first build of
//! SlateDB's dependency tree takes 10-20 minutes on 2 cores, the build cache
//! stays in hack/durable-peer/target/):
//!
//!   cargo build --release --locked --manifest-path hack/durable-peer/Cargo.toml
//!
//! and run hack/durable-peer/target/release/durable-peer.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use slatedb::{Db, Settings, WriteBatch};

/// splitmix64: a small, fast, seedable generator; each writer has its own.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is < n/2^64).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let x = self.next().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
    }
}

/// One writer until deadline (a request started before it finishes):
/// durable puts (batch 0), or WriteBatches of `batch` puts not awaited;
/// returns each request's latency in nanoseconds.
async fn writer(db: Db, seed: u64, deadline: Instant, batch: u64) -> Result<Vec<u64>, slatedb::Error> {
    let mut rng = Rng(seed);
    let mut value = [0u8; 400];
    let mut lat = Vec::with_capacity(1 << 14);
    while Instant::now() < deadline {
        let t = Instant::now();
        if batch == 0 {
            let key = format!("{:020}", rng.below(100_000));
            rng.fill(&mut value[..200]);
            db.put(key.as_bytes(), &value[..]).await?.await_durable().await?;
        } else {
            let mut wb = WriteBatch::new();
            for _ in 0..batch {
                let key = format!("{:020}", rng.below(100_000));
                rng.fill(&mut value[..200]);
                wb.put(key.as_bytes(), &value[..]);
            }
            db.write(wb).await?;
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok(lat)
}

/// THREADS writers at once for secs; all their latencies.
async fn phase(db: &Db, threads: u64, seed0: u64, secs: f64, batch: u64) -> Result<Vec<u64>, String> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..threads)
        .map(|i| tokio::spawn(writer(db.clone(), seed0 + i, deadline, batch)))
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?);
    }
    Ok(all)
}

/// The process's user+system CPU time so far, every thread's.
fn cpu_time() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

async fn run(url: &str, threads: u64, seconds: f64, flush: &str, batch: u64) -> Result<(), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url}: want s3://bucket/path"))?;
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = if path.is_empty() { "peer" } else { path };
    let flush_interval = duration_str::parse(flush).map_err(|e| format!("FLUSH {flush}: {e}"))?;

    let store = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_allow_http(true)
        .build()
        .map_err(|e| format!("object store: {e}"))?;
    let mut settings = Settings::default();
    settings.flush_interval = Some(flush_interval);
    let db = Db::builder(path, Arc::new(store))
        .with_settings(settings)
        .build()
        .await
        .map_err(|e| format!("open {url}: {e}"))?;

    // One second of warm-up, not counted.
    phase(&db, threads, 1 << 32, 1.0, batch).await?;
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut lat = phase(&db, threads, 0, seconds, batch).await?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    let flushed = Instant::now();
    db.flush().await.map_err(|e| format!("flush: {e}"))?;
    let flush_us = flushed.elapsed().as_secs_f64() * 1e6;
    db.close().await.map_err(|e| format!("close: {e}"))?;

    lat.sort_unstable();
    let n = lat.len();
    let us = |i: usize| if n > 0 { lat[i] as f64 / 1e3 } else { 0.0 };
    let ops = n as u64 * batch.max(1);
    let per_op = if ops > 0 { cpu / ops as f64 * 1e6 } else { 0.0 };
    let name = if batch == 0 { "fillsync" } else { "fillbatch" };
    println!(
        "{{\"name\":\"{name}\",\"threads\":{threads},\"batch\":{},\"ops\":{ops},\"opsPerSec\":{:.1},\"p50\":{:.1},\"p99\":{:.1},\"clientCpuMicrosPerOp\":{per_op:.2},\"flushMicros\":{flush_us:.0},\"flushInterval\":\"{}\"}}",
        batch.max(1),
        ops as f64 / secs,
        us(n / 2),
        us(n * 99 / 100),
        flush.replace(['"', '\\'], ""),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = || {
        eprintln!("usage: durable-peer s3://bucket/path THREADS SECONDS [FLUSH [BATCH]]");
        ExitCode::from(2)
    };
    if args.len() < 4 || args.len() > 6 {
        return usage();
    }
    let (Ok(threads), Ok(seconds)) = (args[2].parse::<u64>(), args[3].parse::<f64>()) else {
        return usage();
    };
    if threads == 0 || !(seconds > 0.0) {
        return usage();
    }
    let flush = args.get(4).map_or("2ms", String::as_str);
    let Ok(batch) = args.get(5).map_or(Ok(0), |b| b.parse::<u64>()) else {
        return usage();
    };
    match run(&args[1], threads, seconds, flush, batch).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("durable-peer: {e}");
            ExitCode::FAILURE
        }
    }
}

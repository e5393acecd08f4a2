//! Load for a Zaqar v2 server (Weir's Zaqar API or the real Zaqar): the same
//! HTTP requests, headers and pacing against either, so `benches/zaqar-compare`
//! can put the two side by side.
//!
//! ```sh
//! cargo bench --bench zaqar_load -- --url http://127.0.0.1:8161 --queue q1 --scenario post
//! cargo bench --bench zaqar_load -- --url http://127.0.0.1:8161 --queue q1 --scenario claim-delete --prefill 10000
//! cargo bench --bench zaqar_load -- --url http://127.0.0.1:8161 --queue q2 --scenario delay
//! ```
//!
//! - `post`: `--clients` tasks post batches of `--batch` messages (`--size` bytes
//!   of JSON body each) for `--seconds`; a batch counts once it is answered `201`.
//! - `claim-delete`: `--prefill` messages are posted first (untimed), then
//!   `--clients` tasks claim (`limit=--batch`) and delete the claimed messages
//!   by ids, until the queue has nothing to claim or `--seconds` pass.
//! - `delay`: the queue gets `_default_message_delay` 1; one task posts
//!   `--messages` messages in batches of `--batch`, every `--interval-ms`, each
//!   with `delay` 1 or 2 s in turn; `--claimers` tasks claim (`limit=20`)
//!   every `--poll-ms` while nothing is there and delete what they got. Lateness
//!   is the time a claim first returned a message minus its due time (the post
//!   request's send time plus its delay): negative means delivered early.
//!
//! Every request carries `Client-ID` (a fixed UUID per task) and `X-Project-Id`
//! (`--project`). One JSON line goes to stdout; exit status 0 for a clean run,
//! 1 when a request failed or (delay) a message never came, 2 when the run
//! could not be made.

use clap::{Parser, ValueEnum};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum Scenario {
    Post,
    ClaimDelete,
    Delay,
}

#[derive(Parser, Debug, Clone)]
struct Args {
    /// The server's base URL (the `/v2` paths go under it).
    #[arg(long)]
    url: String,
    #[arg(long)]
    queue: String,
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// `X-Project-Id` of every request.
    #[arg(long, default_value = "weirbench")]
    project: String,
    /// Leave the queue after the run (by default it is deleted, untimed).
    #[arg(long)]
    keep_queue: bool,
    /// Concurrent posters (post) or claimers (claim-delete).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Messages per post, and the claim limit of claim-delete.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Bytes of each message's JSON body.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Length of a post or claim-delete run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// claim-delete: messages posted (untimed, by `--clients` tasks) before
    /// the claimers start; 0 claims what the queue already holds.
    #[arg(long, default_value_t = 0)]
    prefill: usize,
    /// delay: how many messages to post.
    #[arg(long, default_value_t = 2000)]
    messages: usize,
    /// delay: milliseconds between two posts.
    #[arg(long, default_value_t = 20)]
    interval_ms: u64,
    /// delay: claiming tasks.
    #[arg(long, default_value_t = 1)]
    claimers: usize,
    /// delay: milliseconds a claimer waits after an empty claim.
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// delay: seconds to wait for the last message after the last post.
    #[arg(long, default_value_t = 30)]
    drain_timeout: u64,
    // `cargo bench` passes `--bench` to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

/// A fixed, valid UUID per task, the same against every server.
fn client_id(task: usize) -> String {
    format!("5a9a7c1e-0000-4000-8000-{task:012x}")
}

#[derive(Debug)]
enum RunError {
    Http(reqwest::Error),
    Status(StatusCode, String),
    Body(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Http(e) => write!(f, "request failed: {e}"),
            RunError::Status(s, body) => write!(f, "answered {s}: {body}"),
            RunError::Body(e) => write!(f, "unexpected body: {e}"),
        }
    }
}

impl From<reqwest::Error> for RunError {
    fn from(e: reqwest::Error) -> Self {
        RunError::Http(e)
    }
}

/// One task's view of the server: its client and headers.
#[derive(Clone)]
struct Api {
    http: Client,
    base: String,
    client_id: String,
    project: String,
}

impl Api {
    fn new(http: &Client, args: &Args, task: usize) -> Api {
        Api {
            http: http.clone(),
            base: format!(
                "{}/v2/queues/{}",
                args.url.trim_end_matches('/'),
                args.queue
            ),
            client_id: client_id(task),
            project: args.project.clone(),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("Client-ID", &self.client_id)
            .header("X-Project-Id", &self.project)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
    }

    async fn expect(
        &self,
        rb: reqwest::RequestBuilder,
        ok: &[StatusCode],
    ) -> Result<(StatusCode, bytes::Bytes), RunError> {
        let resp = rb.send().await?;
        let status = resp.status();
        let body = resp.bytes().await?;
        if ok.contains(&status) {
            Ok((status, body))
        } else {
            Err(RunError::Status(
                status,
                String::from_utf8_lossy(&body).into_owned(),
            ))
        }
    }

    async fn create_queue(&self, metadata: Value) -> Result<(), RunError> {
        let rb = self
            .request(reqwest::Method::PUT, "")
            .body(metadata.to_string());
        self.expect(rb, &[StatusCode::CREATED, StatusCode::NO_CONTENT])
            .await
            .map(|_| ())
    }

    async fn delete_queue(&self) -> Result<(), RunError> {
        let rb = self.request(reqwest::Method::DELETE, "");
        self.expect(rb, &[StatusCode::NO_CONTENT]).await.map(|_| ())
    }

    async fn post(&self, body: String) -> Result<(), RunError> {
        let rb = self.request(reqwest::Method::POST, "/messages").body(body);
        self.expect(rb, &[StatusCode::CREATED]).await.map(|_| ())
    }

    /// The claimed messages as (id, body), empty when there was nothing.
    async fn claim(&self, limit: usize) -> Result<Vec<(String, Value)>, RunError> {
        let rb = self
            .request(reqwest::Method::POST, &format!("/claims?limit={limit}"))
            .body(r#"{"ttl": 60, "grace": 60}"#);
        let (status, body) = self
            .expect(rb, &[StatusCode::CREATED, StatusCode::NO_CONTENT])
            .await?;
        if status == StatusCode::NO_CONTENT {
            return Ok(Vec::new());
        }
        let doc: Value =
            serde_json::from_slice(&body).map_err(|e| RunError::Body(e.to_string()))?;
        let list = doc
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| RunError::Body("a claim without \"messages\"".into()))?;
        list.iter()
            .map(|m| {
                let id = m
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RunError::Body("a claimed message without an id".into()))?;
                Ok((id.to_owned(), m.get("body").cloned().unwrap_or(Value::Null)))
            })
            .collect()
    }

    async fn delete_ids(&self, ids: &[String]) -> Result<(), RunError> {
        let rb = self.request(
            reqwest::Method::DELETE,
            &format!("/messages?ids={}", ids.join(",")),
        );
        self.expect(rb, &[StatusCode::NO_CONTENT]).await.map(|_| ())
    }
}

/// What [`batch_json`] must write, built the slow way; checked once per run.
fn reference_batch_json(first_seq: u64, n: usize, size: usize, delays: Option<&[u64]>) -> String {
    let messages: Vec<Value> = (0..n)
        .map(|i| {
            let seq = first_seq + i as u64;
            let pad = size.saturating_sub(24 + seq.to_string().len());
            let mut m = json!({"ttl": 3600, "body": {"seq": seq, "pad": "x".repeat(pad)}});
            if let Some(d) = delays {
                m["delay"] = json!(d[i]);
            }
            m
        })
        .collect();
    json!({ "messages": messages }).to_string()
}

/// The JSON of a post: the bytes `serde_json` makes of
/// `{"messages": [{"ttl": 3600, "body": message_body(..), "delay": ..}]}`
/// (keys sorted, no spaces), written straight into one string: the load
/// tool shares the machine with the server, and building a `Value` tree
/// per message cost it a third of its CPU.
fn batch_json(first_seq: u64, n: usize, size: usize, delays: Option<&[u64]>) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(16 + n * (size + 48));
    out.push_str(r#"{"messages":["#);
    for i in 0..n {
        let seq = first_seq + i as u64;
        let pad = size.saturating_sub(24 + decimal_digits(seq));
        if i > 0 {
            out.push(',');
        }
        out.push_str(r#"{"body":{"pad":""#);
        out.extend(std::iter::repeat_n('x', pad));
        let _ = write!(out, r#"","seq":{seq}}}"#);
        if let Some(d) = delays {
            let _ = write!(out, r#","delay":{}"#, d[i]);
        }
        out.push_str(r#","ttl":3600}"#);
    }
    out.push_str("]}");
    out
}

fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Percentiles of signed microsecond samples.
fn percentiles(mut v: Vec<i64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_unstable();
    let at = |q: f64| v[(((v.len() - 1) as f64) * q).round() as usize];
    json!({"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "p999": at(0.999), "max": v[v.len() - 1]})
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// What the tasks of one run share.
#[derive(Default)]
struct Tally {
    messages: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    latencies: Mutex<Vec<i64>>,
    first_error: Mutex<Option<String>>,
}

impl Tally {
    fn error(&self, e: &RunError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| e.to_string());
    }

    fn latencies(&self, mine: Vec<i64>) {
        self.latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(mine);
    }
}

async fn run_post(args: &Args, http: &Client) -> Result<Value, RunError> {
    Api::new(http, args, 0).create_queue(json!({})).await?;
    let tally = Arc::new(Tally::default());
    let next_seq = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for task in 0..args.clients {
        let api = Api::new(http, args, task);
        let (tally, next_seq, args) = (tally.clone(), next_seq.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let first = next_seq.fetch_add(args.batch as u64, Ordering::Relaxed);
                let body = batch_json(first, args.batch, args.size, None);
                let t0 = Instant::now();
                tally.requests.fetch_add(1, Ordering::Relaxed);
                match api.post(body).await {
                    Ok(()) => {
                        lat.push(micros(t0.elapsed()));
                        tally
                            .messages
                            .fetch_add(args.batch as u64, Ordering::Relaxed);
                    }
                    Err(e) => tally.error(&e),
                }
            }
            tally.latencies(lat);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(summary(args, &tally, start.elapsed(), None, 0))
}

/// Posts `--prefill` messages with `--clients` tasks; the first error ends it.
async fn prefill(args: &Args, http: &Client) -> Result<(), RunError> {
    Api::new(http, args, 0).create_queue(json!({})).await?;
    let batches = args.prefill.div_ceil(args.batch.max(1));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks: Vec<tokio::task::JoinHandle<Result<(), RunError>>> = Vec::new();
    for task in 0..args.clients {
        let api = Api::new(http, args, task);
        let (next, args) = (next.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed) as usize;
                if b >= batches {
                    return Ok(());
                }
                let first = b * args.batch;
                let n = args.batch.min(args.prefill - first);
                api.post(batch_json(first as u64, n, args.size, None))
                    .await?;
            }
        }));
    }
    for t in tasks {
        match t.await {
            Ok(r) => r?,
            Err(e) => return Err(RunError::Body(format!("a prefill task failed: {e}"))),
        }
    }
    Ok(())
}

async fn run_claim_delete(args: &Args, http: &Client) -> Result<Value, RunError> {
    if args.prefill > 0 {
        prefill(args, http).await?;
    }
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for task in 0..args.clients {
        let api = Api::new(http, args, task);
        let (tally, limit) = (tally.clone(), args.batch);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                tally.requests.fetch_add(1, Ordering::Relaxed);
                let claimed = match api.claim(limit).await {
                    Ok(c) => c,
                    Err(e) => {
                        tally.error(&e);
                        continue;
                    }
                };
                lat.push(micros(t0.elapsed()));
                if claimed.is_empty() {
                    break;
                }
                let ids: Vec<String> = claimed.into_iter().map(|(id, _)| id).collect();
                let t1 = Instant::now();
                tally.requests.fetch_add(1, Ordering::Relaxed);
                match api.delete_ids(&ids).await {
                    Ok(()) => {
                        lat.push(micros(t1.elapsed()));
                        tally
                            .messages
                            .fetch_add(ids.len() as u64, Ordering::Relaxed);
                    }
                    Err(e) => tally.error(&e),
                }
            }
            tally.latencies(lat);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(summary(args, &tally, start.elapsed(), None, 0))
}

async fn run_delay(args: &Args, http: &Client) -> Result<Value, RunError> {
    Api::new(http, args, 0)
        .create_queue(json!({"_default_message_delay": 1}))
        .await?;
    let total = args.messages;
    // Per message: its due time, and when a claim first returned it.
    let due: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; total]));
    let seen: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; total]));
    let received = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Tally::default());
    let start = Instant::now();

    let poster = {
        let api = Api::new(http, args, 0);
        let (due, tally, args) = (due.clone(), tally.clone(), args.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(args.interval_ms));
            let mut seq = 0usize;
            while seq < total {
                tick.tick().await;
                let n = args.batch.min(total - seq);
                let delays: Vec<u64> = (seq..seq + n).map(|i| 1 + (i % 2) as u64).collect();
                let body = batch_json(seq as u64, n, args.size, Some(&delays));
                let sent = Instant::now();
                {
                    let mut due = due.lock().unwrap_or_else(|p| p.into_inner());
                    for (i, d) in delays.iter().enumerate() {
                        due[seq + i] = Some(sent + Duration::from_secs(*d));
                    }
                }
                tally.requests.fetch_add(1, Ordering::Relaxed);
                match api.post(body).await {
                    Ok(()) => {
                        tally.messages.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) => tally.error(&e),
                }
                seq += n;
            }
        })
    };

    let mut claimers = Vec::new();
    for task in 0..args.claimers {
        let api = Api::new(http, args, 1 + task);
        let (seen, received, tally) = (seen.clone(), received.clone(), tally.clone());
        let poll = Duration::from_millis(args.poll_ms);
        let give_up = Duration::from_secs(args.drain_timeout);
        let posting_for =
            Duration::from_millis(args.interval_ms * (total / args.batch.max(1)) as u64);
        claimers.push(tokio::spawn(async move {
            let stop_at = start + posting_for + Duration::from_secs(2) + give_up;
            while (received.load(Ordering::Relaxed) as usize) < total && Instant::now() < stop_at {
                tally.requests.fetch_add(1, Ordering::Relaxed);
                let claimed = match api.claim(20).await {
                    Ok(c) => c,
                    Err(e) => {
                        tally.error(&e);
                        tokio::time::sleep(poll).await;
                        continue;
                    }
                };
                let now = Instant::now();
                if claimed.is_empty() {
                    tokio::time::sleep(poll).await;
                    continue;
                }
                let mut ids = Vec::with_capacity(claimed.len());
                {
                    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                    for (id, body) in claimed {
                        ids.push(id);
                        let Some(seq) = body.get("seq").and_then(Value::as_u64) else {
                            continue;
                        };
                        if let Some(slot) = seen.get_mut(seq as usize) {
                            if slot.is_none() {
                                *slot = Some(now);
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                tally.requests.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = api.delete_ids(&ids).await {
                    tally.error(&e);
                }
            }
        }));
    }
    let _ = poster.await;
    for c in claimers {
        let _ = c.await;
    }

    let due = due.lock().unwrap_or_else(|p| p.into_inner());
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    let mut lateness = Vec::with_capacity(total);
    let mut early = 0;
    let mut last_seen = start;
    for (d, s) in due.iter().zip(seen.iter()) {
        if let (Some(d), Some(s)) = (d, s) {
            let late = if s >= d {
                micros(*s - *d)
            } else {
                -micros(*d - *s)
            };
            if late < -1000 {
                early += 1;
            }
            lateness.push(late);
            last_seen = last_seen.max(*s);
        }
    }
    let lost = total as u64 - received.load(Ordering::Relaxed);
    let mut out = summary(
        args,
        &tally,
        last_seen.saturating_duration_since(start),
        Some(percentiles(lateness)),
        early,
    );
    out["received"] = json!(received.load(Ordering::Relaxed));
    out["lost"] = json!(lost);
    // The posting pace sets the rate of a delayed run: it is no throughput.
    out["msgs_per_sec"] = Value::Null;
    Ok(out)
}

fn summary(
    args: &Args,
    tally: &Tally,
    elapsed: Duration,
    lateness: Option<Value>,
    early: u64,
) -> Value {
    let messages = tally.messages.load(Ordering::Relaxed);
    let lat = std::mem::take(&mut *tally.latencies.lock().unwrap_or_else(|p| p.into_inner()));
    json!({
        "scenario": match args.scenario {
            Scenario::Post => "post",
            Scenario::ClaimDelete => "claim-delete",
            Scenario::Delay => "delay",
        },
        "clients": args.clients,
        "batch": args.batch,
        "size": args.size,
        "messages": messages,
        "requests": tally.requests.load(Ordering::Relaxed),
        "errors": tally.errors.load(Ordering::Relaxed),
        "first_error": *tally.first_error.lock().unwrap_or_else(|p| p.into_inner()),
        "seconds": elapsed.as_secs_f64(),
        "msgs_per_sec": messages as f64 / elapsed.as_secs_f64().max(1e-9),
        "latency_us": percentiles(lat),
        "lateness_us": lateness,
        "violations": {"early": early},
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let delays = [1, 2].repeat(args.batch);
    for (first, delays) in [(0, None), (9_999_990, Some(&delays[..args.batch]))] {
        if batch_json(first, args.batch, args.size, delays)
            != reference_batch_json(first, args.batch, args.size, delays)
        {
            eprintln!("zaqar_load: batch_json differs from its reference");
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("zaqar_load: no runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async {
        let http = match Client::builder()
            .pool_max_idle_per_host(args.clients.max(args.claimers) + 1)
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(60))
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("zaqar_load: no HTTP client: {e}");
                return ExitCode::from(2);
            }
        };
        let result = match args.scenario {
            Scenario::Post => run_post(&args, &http).await,
            Scenario::ClaimDelete => run_claim_delete(&args, &http).await,
            Scenario::Delay => run_delay(&args, &http).await,
        };
        // Untimed: what one run left must not weigh on the next.
        if result.is_ok() && !args.keep_queue {
            if let Err(e) = Api::new(&http, &args, 0).delete_queue().await {
                eprintln!("zaqar_load: deleting the queue: {e}");
            }
        }
        match result {
            Err(e) => {
                eprintln!("zaqar_load: {e}");
                ExitCode::from(2)
            }
            Ok(out) => {
                println!("{out}");
                let failed = out["errors"].as_u64().unwrap_or(0) > 0
                    || out["lost"].as_u64().unwrap_or(0) > 0;
                if failed {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                }
            }
        }
    })
}

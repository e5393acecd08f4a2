//! Shared by the connection fuzz targets: one broker for the whole fuzzing process, and a
//! client that plays a scripted conversation with the broker's real connection code over an
//! in-memory stream.
//!
//! Each input is a script: steps of bytes to write, some of which wait for what the broker
//! said first (a SCRAM client-final needs the server's nonce and salt). After the last step
//! the client closes its write side and reads until the broker closes; a connection still
//! open [`HANG`] after that is a hang and fails the run.

pub mod amqp;
pub mod scram;
pub mod stomp;
pub mod users;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::runtime::Runtime;
use tokio::sync::{broadcast, Notify};
use weir::config::Config;
use weir::core::Broker;
use weir::protocol::Peer;

/// How long the broker may take to close a connection whose client has stopped talking.
/// Every wait in the broker's handshakes is bounded by a timeout of the options (set short
/// here), so anything longer is a connection that never ends.
pub const HANG: Duration = Duration::from_secs(10);

/// One step of a client's script.
pub enum Step {
    Write(Vec<u8>),
    /// Waits (up to [`REPLY_WAIT`]) for the broker's output to satisfy the closure, which
    /// then gives the bytes to write; nothing is written if the broker never does.
    Reply(Answer),
}

/// Given all the broker said so far, the bytes to write, or `None` to wait for more.
pub type Answer = Box<dyn FnMut(&[u8]) -> Option<Vec<u8>> + Send>;

/// How long a [`Step::Reply`] waits for what it needs.
/// The broker answers in microseconds; more is for a loaded machine. A script whose reply
/// never comes (a SCRAM client-final after no SCRAM start) costs this much, so it is short.
pub const REPLY_WAIT: Duration = Duration::from_millis(500);

pub struct Harness {
    pub runtime: Runtime,
    pub broker: Broker,
    _dir: tempfile::TempDir,
}

/// The fuzzing process's broker, on a temporary RocksDB directory.
pub fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory for the broker");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("Tokio runtime");
        let mut config = Config::from_toml_str(&users::config()).expect("fuzzing config");
        config.set_data_dir(dir.path().join("data"));
        let broker = runtime
            .block_on(async { weir::server::open_broker(&config) })
            .expect("broker on a temporary directory");
        Harness {
            runtime,
            broker,
            _dir: dir,
        }
    })
}

/// A peer as the transport would describe it.
pub fn peer(tls: bool, certified_user: Option<String>) -> Peer {
    Peer {
        addr: "127.0.0.1:40000".parse().expect("literal address"),
        tls,
        certified_user,
        transport: weir::protocol::peer::TCP,
    }
}

impl Harness {
    /// Serves one connection with `serve` and plays `script` against it. Panics when the
    /// connection is still open [`HANG`] after the script ended.
    pub fn run<F, Fut>(&self, script: Vec<Step>, serve: F)
    where
        F: FnOnce(DuplexStream, broadcast::Receiver<()>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.runtime.block_on(async {
            let (client, server) = tokio::io::duplex(64 * 1024);
            let (_shutdown, shutdown_rx) = broadcast::channel(1);
            let connection = tokio::spawn(serve(server, shutdown_rx));
            let (mut read, mut write) = tokio::io::split(client);
            let heard = Arc::new(Heard::default());
            let reader = {
                let heard = heard.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        match read.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => heard.push(&buf[..n]),
                        }
                    }
                    heard.close();
                })
            };
            for step in script {
                let bytes = match step {
                    Step::Write(bytes) => Some(bytes),
                    Step::Reply(answer) => heard.wait_for(answer).await,
                };
                let Some(bytes) = bytes else { continue };
                // The broker may close first (an error, a refused login): then stop writing.
                if write.write_all(&bytes).await.is_err() {
                    break;
                }
            }
            let _ = write.shutdown().await;
            let ended = within_running_time(HANG, async {
                let _ = connection.await;
                let _ = reader.await;
            })
            .await;
            if !ended {
                let said = heard.snapshot();
                panic!(
                    "the connection was still open {HANG:?} after the client closed; the broker \
                     said {} bytes, ending {:?}",
                    said.len(),
                    String::from_utf8_lossy(&said[said.len().saturating_sub(200)..])
                );
            }
        });
    }
}

/// Whether `done` finishes within `limit` of time this process was running. A stretch in
/// which it was stopped (a benchmark guard's SIGSTOP on niced processes, a paused VM) is
/// not counted: a timer firing late by seconds after such a stop is not a hang.
async fn within_running_time(limit: Duration, done: impl Future<Output = ()>) -> bool {
    const SLICE: Duration = Duration::from_millis(250);
    tokio::pin!(done);
    let mut waited = Duration::ZERO;
    while waited < limit {
        let started = std::time::Instant::now();
        if tokio::time::timeout(SLICE, &mut done).await.is_ok() {
            return true;
        }
        let took = started.elapsed();
        if took < SLICE * 4 {
            waited += took;
        }
    }
    false
}

/// What the broker has written so far, for steps that answer it.
#[derive(Default)]
struct Heard {
    bytes: parking_lot_free::Mutex<(Vec<u8>, bool)>,
    changed: Notify,
}

impl Heard {
    fn push(&self, bytes: &[u8]) {
        self.bytes.lock().0.extend_from_slice(bytes);
        self.changed.notify_waiters();
    }

    fn close(&self) {
        self.bytes.lock().1 = true;
        self.changed.notify_waiters();
    }

    fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().0.clone()
    }

    async fn wait_for(&self, mut answer: Answer) -> Option<Vec<u8>> {
        let deadline = tokio::time::Instant::now() + REPLY_WAIT;
        loop {
            let changed = self.changed.notified();
            {
                let guard = self.bytes.lock();
                if let Some(bytes) = answer(&guard.0) {
                    return Some(bytes);
                }
                if guard.1 {
                    return None;
                }
            }
            tokio::time::timeout_at(deadline, changed).await.ok()?;
        }
    }
}

/// `std::sync::Mutex` without poisoning noise: a panic here ends the fuzzing run anyway.
mod parking_lot_free {
    #[derive(Default)]
    pub struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

//! Delayed-delivery figures over real sockets (not a timed test):
//!
//!   cargo bench --bench delay_load -- scale N SPREAD_S
//!     N durable delayed messages due over SPREAD_S seconds (starting in a
//!     minute): send rate, broker RSS while they wait, disk used, then kill -9
//!     and the time until a restarted broker accepts connections, and its RSS.
//!   cargo bench --bench delay_load -- punctual N SPREAD_S LEAD_S
//!     N durable messages due over SPREAD_S seconds starting LEAD_S seconds
//!     after the start, one consumer: lateness (receive minus due) p50/p99/max.
//!
//! WEIR_BIN overrides the broker binary (default: the one cargo built).

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn start(data: &Path) -> (Child, SocketAddr, Duration) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let bin = std::env::var("WEIR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_weir").to_owned());
    let began = Instant::now();
    let child = Command::new(bin)
        .args([
            "serve", "--log", "warn", "--amqp", "off", "--http", "off", "--stomp",
        ])
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    while TcpStream::connect(addr).is_err() {
        std::thread::sleep(Duration::from_millis(5));
    }
    (child, addr, began.elapsed())
}

fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn disk_mib(dir: &Path) -> f64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        total += entry.metadata().map(|m| m.len()).unwrap_or(0);
    }
    total as f64 / (1 << 20) as f64
}

fn connect(addr: SocketAddr) -> (BufWriter<TcpStream>, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut w = BufWriter::with_capacity(1 << 16, s.try_clone().unwrap());
    let mut r = BufReader::with_capacity(1 << 16, s);
    w.write_all(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        .unwrap();
    w.flush().unwrap();
    let f = read_frame(&mut r).unwrap();
    assert_eq!(f.0, "CONNECTED");
    (w, r)
}

/// (command, delivery-time header if any)
fn read_frame(r: &mut BufReader<TcpStream>) -> Option<(String, Option<u64>)> {
    let mut line = String::new();
    let command = loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let t = line.trim_matches(|c| c == '\0' || c == '\n' || c == '\r');
        if !t.is_empty() {
            break t.to_owned();
        }
    };
    let mut due = None;
    let mut len = None;
    loop {
        line.clear();
        r.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("delivery-time:") {
            due = v.parse().ok();
        } else if let Some(v) = l.strip_prefix("content-length:") {
            len = v.parse::<usize>().ok();
        }
    }
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n + 1, 0);
            r.read_exact(&mut body).ok()?;
        }
        None => {
            r.read_until(0, &mut body).ok()?;
        }
    }
    Some((command, due))
}

/// Sends `count` messages from one connection, due at `due(i)`; a receipt on
/// the last one makes the return mean "all on disk".
fn produce(addr: SocketAddr, count: u64, first: u64, due: impl Fn(u64) -> u64) {
    let (mut w, mut r) = connect(addr);
    let body = "x".repeat(128);
    for i in first..first + count {
        let receipt = if i + 1 == first + count {
            "receipt:last\n"
        } else {
            ""
        };
        write!(
            w,
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_TIME:{}\n{receipt}\n{body}\0",
            due(i)
        )
        .unwrap();
    }
    w.flush().unwrap();
    loop {
        match read_frame(&mut r) {
            Some((c, _)) if c == "RECEIPT" => break,
            Some((c, _)) if c == "ERROR" => panic!("broker refused a message"),
            Some(_) => {}
            None => panic!("connection closed"),
        }
    }
}

fn send_all(addr: SocketAddr, n: u64, producers: u64, due: impl Fn(u64) -> u64 + Sync) -> f64 {
    let began = Instant::now();
    std::thread::scope(|s| {
        for p in 0..producers {
            let due = &due;
            s.spawn(move || produce(addr, n / producers, p * (n / producers), due));
        }
    });
    (n / producers * producers) as f64 / began.elapsed().as_secs_f64()
}

fn scale(n: u64, spread_s: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = start(dir.path());
    let base = now_ms() + 60_000;
    let spread = spread_s * 1000;
    let rate = send_all(addr, n, 4, |i| base + (i * 7919) % spread);
    println!("scale: sent {n} durable delayed messages due over {spread_s}s: {rate:.0} msg/s");
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(5));
        let (rss, hwm) = rss_mib(child.id());
        println!(
            "scale: waiting: RSS {rss:.0} MiB (peak {hwm:.0} MiB), disk {:.0} MiB",
            disk_mib(dir.path())
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    let (mut child, _, ready) = start(dir.path());
    println!("recovery: kill -9 with {n} waiting: accepting connections after {ready:?}");
    std::thread::sleep(Duration::from_secs(2));
    let (rss, hwm) = rss_mib(child.id());
    println!("recovery: RSS {rss:.0} MiB (peak {hwm:.0} MiB)");
    let _ = child.kill();
    let _ = child.wait();
}

fn punctual(n: u64, spread_s: u64, lead_s: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = start(dir.path());
    let base = now_ms() + lead_s * 1000;
    let spread = spread_s * 1000;
    let consumer = std::thread::spawn(move || {
        let (mut w, mut r) = connect(addr);
        w.write_all(b"SUBSCRIBE\nid:0\ndestination:/queue/delayed\nack:auto\n\n\0")
            .unwrap();
        w.flush().unwrap();
        let mut late = Vec::with_capacity(n as usize);
        let mut early = 0u64;
        while (late.len() as u64) < n {
            match read_frame(&mut r) {
                Some((c, Some(due))) if c == "MESSAGE" => {
                    let now = now_ms();
                    if now < due {
                        early += 1;
                    }
                    late.push(now.saturating_sub(due));
                }
                Some(_) => {}
                None => break,
            }
        }
        (late, early)
    });
    let rate = send_all(addr, n, 4, |i| base + (i * 7919) % spread);
    let sent_by = now_ms();
    println!(
        "punctual: sent {n} in {:.1}s ({rate:.0} msg/s); first due {}s after start",
        (sent_by + lead_s * 1000 - base) as f64 / 1000.0,
        lead_s
    );
    if sent_by > base {
        println!("punctual: WARNING sending overran the first due time; raise LEAD_S");
    }
    let (mut late, early) = consumer.join().unwrap();
    late.sort_unstable();
    let pct = |p: f64| {
        late.get(((late.len() as f64 * p) as usize).min(late.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "punctual: received {} (early {early}): lateness p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms",
        late.len(),
        pct(0.50),
        pct(0.99),
        pct(0.999),
        late.last().copied().unwrap_or(0)
    );
    let (rss, hwm) = rss_mib(child.id());
    println!("punctual: broker RSS {rss:.0} MiB (peak {hwm:.0} MiB)");
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    match args.first().map(String::as_str) {
        Some("scale") => scale(num(1, 1_000_000), num(2, 600)),
        Some("punctual") => punctual(num(1, 1_000_000), num(2, 60), num(3, 90)),
        _ => eprintln!("usage: delay_load scale N SPREAD_S | punctual N SPREAD_S LEAD_S"),
    }
}

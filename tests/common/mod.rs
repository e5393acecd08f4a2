//! Whole-broker test support: run the real binary on free ports and talk raw
//! STOMP to it over TCP, so tests exercise exactly what a client sees.

#![allow(dead_code)]

pub mod amqp_raw;
pub mod http;
pub mod zaqar;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct BrokerProcess {
    child: Child,
    pub stomp: SocketAddr,
    /// The AMQP listener, when started with [`BrokerProcess::start_with_amqp`].
    pub amqp: Option<SocketAddr>,
    /// The management HTTP listener, when started with [`BrokerProcess::start_with_http`]
    /// (off otherwise, so brokers in parallel tests do not contend for its port).
    pub http: Option<SocketAddr>,
    pub data_dir: PathBuf,
    config: Option<PathBuf>,
}

/// A config's `[[users]]`, one a `(name, role)` pair, each with the password
/// `pw`, and `[security]` with no delay after a failed login: the users the
/// whole-broker tests log in as. Permissions follow, per test file.
pub fn users_config(users: &[(&str, &str)]) -> String {
    let mut config = String::new();
    for (name, role) in users {
        config.push_str(&format!(
            "\n[[users]]\nname = \"{name}\"\npassword = \"pw\"\nroles = [\"{role}\"]\n"
        ));
    }
    config.push_str("\n[security]\nlogin_failure_delay = \"0\"\n");
    config
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn write_config(data_dir: &Path, config: Option<&str>) -> Option<PathBuf> {
    config.map(|text| {
        let path = data_dir.with_extension("toml");
        std::fs::write(&path, text).expect("write config");
        path
    })
}

impl BrokerProcess {
    pub fn start(data_dir: &Path, config: Option<&str>) -> Self {
        Self::start_on(data_dir, config, false)
    }

    /// Tests run in parallel: a port can be taken between our probe and the
    /// broker's bind, which makes that broker exit. Then try again.
    fn retry(mut attempt: impl FnMut() -> Option<Self>) -> Self {
        for _ in 0..5 {
            if let Some(broker) = attempt() {
                return broker;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("broker did not start");
    }

    /// Like [`BrokerProcess::start`], with the AMQP listener on a free port as well.
    pub fn start_with_amqp(data_dir: &Path, config: Option<&str>) -> Self {
        Self::start_on(data_dir, config, true)
    }

    /// Like [`BrokerProcess::start`], with the management HTTP listener on a free port.
    pub fn start_with_http(data_dir: &Path, config: Option<&str>) -> Self {
        let config_path = write_config(data_dir, config);
        Self::retry(|| {
            Self::spawn(
                data_dir.to_path_buf(),
                config_path.clone(),
                free_port(),
                None,
                Some(free_port()),
            )
        })
    }

    /// Like [`BrokerProcess::start`], with the AMQP and the management HTTP listeners too.
    pub fn start_with_amqp_and_http(data_dir: &Path, config: Option<&str>) -> Self {
        let config_path = write_config(data_dir, config);
        Self::retry(|| {
            Self::spawn(
                data_dir.to_path_buf(),
                config_path.clone(),
                free_port(),
                Some(free_port()),
                Some(free_port()),
            )
        })
    }

    fn start_on(data_dir: &Path, config: Option<&str>, amqp: bool) -> Self {
        let config_path = write_config(data_dir, config);
        Self::retry(|| {
            Self::spawn(
                data_dir.to_path_buf(),
                config_path.clone(),
                free_port(),
                amqp.then(free_port),
                None,
            )
        })
    }

    fn spawn(
        data_dir: PathBuf,
        config: Option<PathBuf>,
        port: u16,
        amqp_port: Option<u16>,
        http_port: Option<u16>,
    ) -> Option<Self> {
        let stomp: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let amqp: Option<SocketAddr> = amqp_port.map(|p| format!("127.0.0.1:{p}").parse().unwrap());
        let amqp_arg = amqp.map_or_else(|| "off".to_owned(), |a| a.to_string());
        let http: Option<SocketAddr> = http_port.map(|p| format!("127.0.0.1:{p}").parse().unwrap());
        let http_arg = http.map_or_else(|| "off".to_owned(), |a| a.to_string());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--stomp")
            .arg(stomp.to_string())
            .arg("--amqp")
            .arg(amqp_arg)
            .arg("--http")
            .arg(http_arg)
            .arg("--log")
            .arg("warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(c) = &config {
            cmd.arg("--config").arg(c);
        }
        let child = cmd.spawn().expect("spawn weir");
        let mut broker = Self {
            child,
            stomp,
            amqp,
            http,
            data_dir,
            config,
        };
        broker.wait_ready().then_some(broker)
    }

    /// True once our broker listens; false if it exited (a port was taken).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if TcpStream::connect(self.stomp).is_ok()
                && self.amqp.is_none_or(|a| TcpStream::connect(a).is_ok())
                && self.http.is_none_or(|a| TcpStream::connect(a).is_ok())
            {
                // Whoever answered, make sure it is our broker that holds the ports.
                std::thread::sleep(Duration::from_millis(100));
                return !matches!(self.child.try_wait(), Ok(Some(_)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("broker did not start listening on {}", self.stomp);
    }

    /// SIGTERM, then waits up to `within` for the process to exit: its exit status,
    /// `None` if it was still running (then it is killed).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: signals our own child process, which we have not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// Starts the broker again on the same data dir, config and ports.
    pub fn restart(self) -> Self {
        self.restart_after_kill()
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(mut self) -> (PathBuf, Option<PathBuf>, u16) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.stomp.port();
        (self.data_dir.clone(), self.config.clone(), port)
    }

    /// Sends `signal` (e.g. `libc::SIGHUP`) to the broker.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: signals our own child process, which we have not reaped yet.
        unsafe { libc::kill(pid, signal) };
    }

    pub fn restart_after_kill(self) -> Self {
        let amqp_port = self.amqp.map(|a| a.port());
        let http_port = self.http.map(|a| a.port());
        let (dir, config, port) = self.kill9();
        Self::retry(|| Self::spawn(dir.clone(), config.clone(), port, amqp_port, http_port))
    }

    /// SIGKILL, then `meanwhile` on the stopped broker's data dir, then starts it
    /// again on the same data dir, config and ports.
    pub fn kill9_and_restart_after(self, meanwhile: impl FnOnce(&Path)) -> Self {
        let amqp_port = self.amqp.map(|a| a.port());
        let http_port = self.http.map(|a| a.port());
        let (dir, config, port) = self.kill9();
        meanwhile(&dir);
        Self::retry(|| Self::spawn(dir.clone(), config.clone(), port, amqp_port, http_port))
    }

    /// The broker's resident memory, from /proc (Linux).
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read /proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS");
        kib * 1024
    }

    pub fn client(&self) -> Stomp {
        Stomp::connect(self.stomp, &[])
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone)]
pub struct Frame {
    pub command: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Frame {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Appends one STOMP frame to `out` (many frames can then go out in one write).
pub fn encode_frame(out: &mut Vec<u8>, command: &str, headers: &[(&str, &str)], body: &[u8]) {
    out.extend_from_slice(command.as_bytes());
    out.push(b'\n');
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}:{v}\n").as_bytes());
    }
    if !body.is_empty() {
        out.extend_from_slice(format!("content-length:{}\n", body.len()).as_bytes());
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out.push(0);
}

/// A blocking byte stream over TCP: the socket itself, or TLS over it.
pub trait Socket: Read + Write {
    fn tcp(&self) -> &TcpStream;
}

impl Socket for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

/// A deliberately simple STOMP 1.2 client: blocking socket, one frame at a time.
pub struct Stomp<S: Socket = TcpStream> {
    stream: S,
    buf: Vec<u8>,
    pub connected: Frame,
}

impl Stomp {
    pub fn connect(addr: SocketAddr, headers: &[(&str, &str)]) -> Self {
        Stomp::connect_over(TcpStream::connect(addr).expect("connect"), headers)
    }
}

impl<S: Socket> Stomp<S> {
    /// CONNECT over a stream already open; `connected` is the broker's answer.
    pub fn connect_over(stream: S, headers: &[(&str, &str)]) -> Self {
        stream
            .tcp()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut s = Self {
            stream,
            buf: Vec::new(),
            connected: Frame {
                command: String::new(),
                headers: vec![],
                body: vec![],
            },
        };
        // Caller's headers first: the first occurrence of a header wins.
        let mut all = headers.to_vec();
        all.extend_from_slice(&[("accept-version", "1.2"), ("host", "localhost")]);
        s.send_frame("CONNECT", &all, b"");
        s.connected = s.recv().expect("CONNECTED");
        s
    }

    /// A client over a stream on which the test sends its own CONNECT.
    pub fn unconnected(stream: S) -> Self {
        stream
            .tcp()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Self {
            stream,
            buf: Vec::new(),
            connected: Frame {
                command: String::new(),
                headers: vec![],
                body: vec![],
            },
        }
    }

    /// The stream under the client, for a test that writes to it in its own way.
    pub fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The socket, for a test that keeps a connection open without reading.
    pub fn into_stream(self) -> S {
        self.stream
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    pub fn send_frame(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut out = Vec::with_capacity(64 + body.len());
        encode_frame(&mut out, command, headers, body);
        self.raw(&out);
    }

    pub fn send(&mut self, dest: &str, body: &str, headers: &[(&str, &str)]) {
        let mut all = vec![("destination", dest)];
        all.extend_from_slice(headers);
        self.send_frame("SEND", &all, body.as_bytes());
    }

    /// Sends with a receipt and waits for it.
    pub fn send_receipted(
        &mut self,
        dest: &str,
        body: &str,
        headers: &[(&str, &str)],
        receipt: &str,
    ) {
        let mut all = vec![("receipt", receipt)];
        all.extend_from_slice(headers);
        self.send(dest, body, &all);
        let f = self.recv().expect("RECEIPT");
        assert_eq!(f.command, "RECEIPT", "{f:?}");
        assert_eq!(f.header("receipt-id"), Some(receipt));
    }

    pub fn subscribe(&mut self, id: &str, dest: &str, ack: &str) {
        self.send_frame(
            "SUBSCRIBE",
            &[
                ("id", id),
                ("destination", dest),
                ("ack", ack),
                ("receipt", "sub"),
            ],
            b"",
        );
        let f = self.recv().expect("RECEIPT for SUBSCRIBE");
        assert_eq!(f.command, "RECEIPT", "{f:?}");
    }

    pub fn ack(&mut self, frame: &Frame) {
        let id = frame.header("ack").expect("ack header").to_owned();
        self.send_frame("ACK", &[("id", &id)], b"");
    }

    pub fn ack_receipted(&mut self, frame: &Frame, receipt: &str) {
        let id = frame.header("ack").expect("ack header").to_owned();
        self.send_frame("ACK", &[("id", &id), ("receipt", receipt)], b"");
    }

    /// The next frame, skipping heart-beats; `None` on timeout or close.
    pub fn recv(&mut self) -> Option<Frame> {
        loop {
            while self.buf.first().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                self.buf.remove(0);
            }
            if let Some(frame) = self.parse() {
                return Some(frame);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Frame> {
        self.stream.tcp().set_read_timeout(Some(timeout)).unwrap();
        let f = self.recv();
        self.stream
            .tcp()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        f
    }

    fn parse(&mut self) -> Option<Frame> {
        let head_end = self.buf.windows(2).position(|w| w == b"\n\n")?;
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.lines();
        let command = lines.next()?.to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let body_start = head_end + 2;
        let len = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let body_end = match len {
            Some(n) => {
                if self.buf.len() < body_start + n + 1 {
                    return None;
                }
                body_start + n
            }
            None => body_start + self.buf[body_start..].iter().position(|b| *b == 0)?,
        };
        let body = self.buf[body_start..body_end].to_vec();
        self.buf.drain(..=body_end);
        Some(Frame {
            command,
            headers,
            body,
        })
    }
}

/// Runs `weir perf` with `args` and returns its exit code, its JSON line and its stderr.
pub fn weir_perf(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("perf")
        .args(["--json-only", "--drain-timeout", "5"])
        .args(args)
        .output()
        .expect("run weir perf");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A `weir perf` run: everything sent was received, nothing lost.
pub fn perf_delivers(args: &[&str], messages: u64) {
    let (code, json, stderr) = weir_perf(args);
    assert_eq!(code, Some(0), "{args:?}: {json} {stderr}");
    for field in [
        format!("\"sent\":{messages},"),
        format!("\"received\":{messages},"),
        "\"lost\":0,".to_owned(),
    ] {
        assert!(json.contains(&field), "{args:?}: no {field} in {json}");
    }
}

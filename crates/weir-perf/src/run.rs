//! One load run: consumers subscribe, producers send (as fast as flow control
//! allows, or at a fixed rate), a progress line a second, then a drain and
//! the summary.

use super::args::{Destination, Endpoint, PerfArgs, Protocol, SaslMechanism};
use super::client::amqp::{AmqpPublisher, AmqpSettings, AmqpSubscriber};
use super::client::stomp::{
    Login, SendSettings, StompPublisher, StompSubscriber, SubscribeSettings,
};
use super::client::{Publisher, Stamp, Subscriber};
use super::clock::Clock;
use super::error::PerfError;
use super::logins::LoginSummary;
use super::stats::{self, q, ConsumerStats, Summary};
use super::transport::{Peer, TlsFiles};
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// A producer writes once this much is buffered, even mid-batch.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// What one producer sends.
#[derive(Debug, Clone)]
struct Plan {
    id: u32,
    /// Messages to send, or `None` to send until `deadline_us`.
    count: Option<u64>,
    deadline_us: Option<u64>,
    /// Microseconds between scheduled sends, at a fixed rate.
    interval_us: Option<f64>,
    start_us: u64,
    receipt_every: u64,
    groups: u32,
    body: Bytes,
}

impl Plan {
    /// Whether the message with sequence `seq`, sent at `now_us`, is the last one.
    fn is_last(&self, seq: u64, now_us: u64) -> bool {
        match (self.count, self.deadline_us) {
            (Some(count), _) => seq + 1 >= count,
            (None, Some(deadline)) => now_us >= deadline,
            (None, None) => false,
        }
    }
}

async fn produce<P: Publisher>(
    mut publisher: P,
    plan: Plan,
    clock: Clock,
    sent: Arc<AtomicU64>,
) -> Result<(), PerfError> {
    if plan.count == Some(0) {
        return Ok(());
    }
    let mut seq = 0u64;
    loop {
        let now = clock.now_us();
        // At a fixed rate: how many messages are due by now; sleep if none.
        let due = match plan.interval_us {
            Some(interval) => {
                let next_due = plan.start_us + (seq as f64 * interval) as u64;
                if next_due > now {
                    tokio::time::sleep_until(clock.instant_of(next_due).into()).await;
                    continue;
                }
                ((now - plan.start_us) as f64 / interval) as u64 + 1 - seq
            }
            None => u64::MAX,
        };
        let mut batch = 0u64;
        let mut confirm = false;
        let mut last = false;
        while batch < due && publisher.buffered() < WRITE_BATCH_BYTES && publisher.room() > 0 {
            // One clock read per message: it stamps the message and ends a timed run.
            let now_us = clock.now_us();
            let sent_us = match plan.interval_us {
                Some(interval) => plan.start_us + (seq as f64 * interval) as u64,
                None => now_us,
            };
            last = plan.is_last(seq, now_us);
            confirm =
                last || (plan.receipt_every > 0 && (seq + 1).is_multiple_of(plan.receipt_every));
            let stamp = Stamp {
                producer: plan.id,
                seq,
                sent_us,
                group: (plan.groups > 0).then(|| (seq % u64::from(plan.groups)) as u32),
            };
            publisher.push(&stamp, &plan.body, confirm);
            seq += 1;
            batch += 1;
            if confirm {
                break;
            }
        }
        publisher.flush().await?;
        sent.fetch_add(batch, Ordering::Relaxed);
        if confirm {
            publisher.wait_confirmed().await?;
        } else if publisher.room() == 0 {
            publisher.wait_room().await?;
        }
        if last {
            return Ok(());
        }
    }
}

async fn consume<S: Subscriber>(
    mut subscriber: S,
    stats: Arc<Mutex<ConsumerStats>>,
    received: Arc<AtomicU64>,
    clock: Clock,
    delay_us: Option<u64>,
    processing: Duration,
) -> Result<(), PerfError> {
    loop {
        let delivery = subscriber.next().await?;
        stats.lock().record(delivery, clock.now_us(), delay_us);
        received.fetch_add(1, Ordering::Relaxed);
        if !processing.is_zero() {
            tokio::time::sleep(processing).await;
        }
        subscriber.settle_last()?;
    }
}

fn describe(args: &PerfArgs, destination: &Destination) -> String {
    let mut s = format!(
        "{} {}->{} {}B {}{}",
        args.url,
        args.producers,
        args.consumers,
        args.size,
        if args.persistent {
            "persistent"
        } else {
            "non-persistent"
        },
        if destination.is_topic() { " topic" } else { "" },
    );
    if let Some(rate) = args.rate {
        s.push_str(&format!(" rate={rate}"));
    }
    if args.groups > 0 {
        s.push_str(&format!(" groups={}", args.groups));
    }
    if let Some(d) = args.delay_ms {
        s.push_str(&format!(" delay={d}ms"));
    }
    s.push_str(&format!(" ack={}", args.ack.stomp_header()));
    s
}

fn validate(args: &PerfArgs) -> Result<(), PerfError> {
    if args.producers == 0 {
        return Err(PerfError::BadArg {
            flag: "--producers",
            why: "at least one producer",
        });
    }
    if args.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return Err(PerfError::BadArg {
            flag: "--rate",
            why: "must be a positive number",
        });
    }
    if args.duration.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
        return Err(PerfError::BadArg {
            flag: "--duration",
            why: "must be a positive number of seconds",
        });
    }
    if !(args.drain_timeout >= 0.0 && args.drain_timeout.is_finite()) {
        return Err(PerfError::BadArg {
            flag: "--drain-timeout",
            why: "must be a number of seconds",
        });
    }
    Ok(())
}

/// Progress since the previous line.
struct Progress {
    started_us: u64,
    last_us: u64,
    last_sent: u64,
    last_received: u64,
}

impl Progress {
    fn line(
        &mut self,
        clock: &Clock,
        sent: u64,
        received: u64,
        stats: &[Arc<Mutex<ConsumerStats>>],
    ) -> Result<String, PerfError> {
        let now = clock.now_us();
        let secs = (now.saturating_sub(self.last_us) as f64 / 1e6).max(1e-6);
        let mut interval = stats::histogram()?;
        for s in stats {
            let mut s = s.lock();
            let _ = interval.add(&s.interval);
            s.interval.reset();
        }
        let line = format!(
            "[{:5.1}s] sent {} ({:.0}/s)  received {} ({:.0}/s)  latency p50 {} us p99 {} us",
            now.saturating_sub(self.started_us) as f64 / 1e6,
            sent,
            (sent - self.last_sent) as f64 / secs,
            received,
            received.saturating_sub(self.last_received) as f64 / secs,
            q(&interval, 0.5),
            q(&interval, 0.99),
        );
        self.last_us = now;
        self.last_sent = sent;
        self.last_received = received;
        Ok(line)
    }
}

/// What every run shares, fixed before any connection is made.
struct Setup {
    destination: Destination,
    clock: Clock,
    delay_us: Option<u64>,
}

/// What --sasl-mechanism needs beside it: a login for PLAIN and SCRAM, a certificate
/// (and no password) for EXTERNAL.
fn mechanism_flags(args: &PerfArgs) -> Result<(), PerfError> {
    let why = match args.sasl_mechanism {
        Some(SaslMechanism::External) if args.tls_cert.is_none() => {
            "EXTERNAL needs a client certificate: --tls-cert and --tls-key"
        }
        Some(SaslMechanism::External) if args.passcode.is_some() => {
            "EXTERNAL takes no --passcode: the certificate is the proof"
        }
        Some(SaslMechanism::External) | None => return Ok(()),
        Some(_) if args.login.is_none() => "PLAIN and SCRAM need --login and --passcode",
        Some(_) => return Ok(()),
    };
    Err(PerfError::BadArg {
        flag: "--sasl-mechanism",
        why,
    })
}

/// Where to connect and as whom, from the flags.
fn connection(args: &PerfArgs) -> Result<(Endpoint, Peer, Login), PerfError> {
    let endpoint = Endpoint::parse(&args.url)?;
    if endpoint.protocol == Protocol::Stomp && args.sasl_mechanism.is_some() {
        return Err(PerfError::BadArg {
            flag: "--sasl-mechanism",
            why: "AMQP only: STOMP logs in with the login and passcode headers",
        });
    }
    mechanism_flags(args)?;
    let tls = TlsFiles {
        ca: args.tls_ca.clone(),
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
        server_name: args.tls_server_name.clone(),
    };
    let peer = Peer::new(&endpoint.authority, endpoint.tls, &tls)?;
    let login = Login {
        login: args.login.clone(),
        passcode: args.passcode.clone(),
        vhost: args.vhost.clone(),
        mechanism: args.sasl_mechanism,
    };
    Ok((endpoint, peer, login))
}

/// `--logins N`: N logins one after another, and their rate.
pub async fn logins(args: &PerfArgs, count: u64) -> Result<LoginSummary, PerfError> {
    if count == 0 {
        return Err(PerfError::BadArg {
            flag: "--logins",
            why: "at least one login",
        });
    }
    let (endpoint, peer, login) = connection(args)?;
    super::logins::run(args, &endpoint, &peer, &login, count).await
}

/// Runs the load described by `args` and returns its summary.
pub async fn load(args: &PerfArgs) -> Result<Summary, PerfError> {
    validate(args)?;
    let (endpoint, peer, login) = connection(args)?;
    let destination = Destination::from_args(args)?;
    let clock = Clock::start();
    // Unique enough to tell this run's messages from leftovers of earlier runs.
    let run_id = clock.now_us() ^ (u64::from(std::process::id()) << 40);
    let subscribe = SubscribeSettings {
        destination: destination.clone(),
        ack: args.ack,
        prefetch: args.prefetch,
        message_size: args.size,
        run_id,
    };
    let send = SendSettings {
        destination: destination.clone(),
        persistent: args.persistent,
        delay_ms: args.delay_ms,
        run_id,
    };
    let setup = Setup {
        destination,
        clock,
        delay_us: args.delay_ms.map(|d| d * 1_000),
    };
    // Consumers subscribe before any producer connects, so a topic loses nothing.
    match endpoint.protocol {
        Protocol::Stomp => {
            let mut subscribers = Vec::new();
            for _ in 0..args.consumers {
                subscribers.push(StompSubscriber::connect(&peer, &login, &subscribe).await?);
            }
            let mut publishers = Vec::new();
            for _ in 0..args.producers {
                publishers.push(StompPublisher::connect(&peer, &login, &send).await?);
            }
            drive(args, setup, subscribers, publishers, args.receipt_every).await
        }
        Protocol::Amqp => {
            let amqp = AmqpSettings {
                settled: args.amqp_settled,
                window: args.receipt_every,
            };
            let mut subscribers = Vec::new();
            for _ in 0..args.consumers {
                subscribers.push(AmqpSubscriber::connect(&peer, &login, &subscribe).await?);
            }
            let mut publishers = Vec::new();
            for _ in 0..args.producers {
                publishers.push(AmqpPublisher::connect(&peer, &login, &send, amqp).await?);
            }
            // --receipt-every is the publishers' window of unsettled sends:
            // the plan asks a confirmation of the last message only.
            drive(args, setup, subscribers, publishers, 0).await
        }
    }
}

/// Sends and receives over connections already made, and sums up.
async fn drive<P, S>(
    args: &PerfArgs,
    setup: Setup,
    subscribers: Vec<S>,
    publishers: Vec<P>,
    receipt_every: u64,
) -> Result<Summary, PerfError>
where
    P: Publisher + 'static,
    S: Subscriber + 'static,
{
    let Setup {
        destination,
        clock,
        delay_us,
    } = setup;
    let received = Arc::new(AtomicU64::new(0));
    let mut stats = Vec::new();
    let mut consumers = JoinSet::new();
    for subscriber in subscribers {
        let s = Arc::new(Mutex::new(ConsumerStats::new(args.producers, args.groups)?));
        stats.push(s.clone());
        consumers.spawn(consume(
            subscriber,
            s,
            received.clone(),
            clock,
            delay_us,
            Duration::from_millis(args.consumer_delay_ms),
        ));
    }

    let total = match (args.messages, args.duration) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(100_000),
    };
    let start_us = clock.now_us();
    let deadline_us = args.duration.map(|d| start_us + (d * 1e6) as u64);
    let body = Bytes::from(vec![b'x'; args.size]);
    let sent = Arc::new(AtomicU64::new(0));
    let mut producers = JoinSet::new();
    let per = u64::from(args.producers);
    for (i, publisher) in publishers.into_iter().enumerate() {
        let id = i as u32;
        let plan = Plan {
            id,
            count: total.map(|n| n / per + u64::from(u64::from(id) < n % per)),
            deadline_us,
            interval_us: args.rate.map(|r| 1e6 * per as f64 / r),
            start_us,
            receipt_every,
            groups: args.groups,
            body: body.clone(),
        };
        producers.spawn(produce(publisher, plan, clock, sent.clone()));
    }

    let mut progress = Progress {
        started_us: start_us,
        last_us: start_us,
        last_sent: 0,
        last_received: 0,
    };
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let report = |progress: &mut Progress| -> Result<(), PerfError> {
        let line = progress.line(
            &clock,
            sent.load(Ordering::Relaxed),
            received.load(Ordering::Relaxed),
            &stats,
        )?;
        if !args.json_only {
            eprintln!("{line}");
        }
        Ok(())
    };
    while !producers.is_empty() {
        tokio::select! {
            joined = producers.join_next() => {
                if let Some(result) = joined {
                    result.map_err(|e| PerfError::Io(e.into()))??;
                }
            }
            _ = tick.tick() => report(&mut progress)?,
        }
    }
    let send_end_us = clock.now_us();
    let sent_total = sent.load(Ordering::Relaxed);
    let fanout = if destination.is_topic() {
        u64::from(args.consumers)
    } else {
        u64::from(args.consumers.min(1))
    };
    let expected = sent_total * fanout;
    let drain = Duration::from_secs_f64(args.drain_timeout)
        + Duration::from_millis(args.delay_ms.unwrap_or(0));
    let drain_deadline = tokio::time::Instant::now() + drain;
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    while received.load(Ordering::Relaxed) < expected
        && tokio::time::Instant::now() < drain_deadline
    {
        tokio::select! {
            _ = poll.tick() => {}
            _ = tick.tick() => report(&mut progress)?,
            joined = consumers.join_next(), if !consumers.is_empty() => {
                if let Some(result) = joined {
                    result.map_err(|e| PerfError::Io(e.into()))??;
                }
            }
        }
    }
    consumers.abort_all();

    let consumer_stats: Vec<ConsumerStats> = stats.iter().map(|s| s.lock().clone()).collect();
    let mut latency = stats::histogram()?;
    let mut lateness = stats::histogram()?;
    let (mut received_total, mut foreign, mut order, mut early, mut last_us) = (0, 0, 0, 0, 0);
    for c in &consumer_stats {
        let _ = latency.add(&c.latency);
        let _ = lateness.add(&c.lateness);
        received_total += c.received;
        foreign += c.foreign;
        order += c.order_violations;
        early += c.early;
        last_us = last_us.max(c.last_us);
    }
    let end_us = if args.consumers > 0 {
        last_us.max(send_end_us)
    } else {
        send_end_us
    };
    Ok(Summary {
        scenario: describe(args, &destination),
        sent: sent_total,
        expected,
        received: received_total,
        foreign,
        seconds: end_us.saturating_sub(start_us) as f64 / 1e6,
        send_seconds: send_end_us.saturating_sub(start_us) as f64 / 1e6,
        latency,
        lateness: delay_us.map(|_| lateness),
        order_violations: order,
        split_groups: stats::split_groups(&consumer_stats),
        early,
    })
}

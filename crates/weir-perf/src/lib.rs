//! `weir perf`: a load generator for STOMP and AMQP 1.0 brokers (behind the
//! same [`client`] traits), and `weir perf --sink-stomp` / `--sink-amqp`, the
//! relay ceilings it is compared with.

pub mod args;
pub mod client;
pub mod clock;
pub mod error;
pub mod logins;
pub mod run;
pub mod sink;
pub mod stats;
pub mod transport;

pub use args::PerfArgs;
pub use error::PerfError;

/// Maps looked up per frame by the sinks: foldhash, as in the broker.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use std::process::ExitCode;

/// Exit status when the run completed but lost messages or broke order.
pub const EXIT_VIOLATION: u8 = 1;
/// Exit status when the run could not be done (bad flags, broker errors).
pub const EXIT_ERROR: u8 = 2;

/// Runs `weir perf` with its own runtime and returns the exit status.
pub fn main(args: PerfArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir perf: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    runtime.block_on(async move {
        if args.sink_stomp.is_some() || args.sink_amqp.is_some() {
            let result = match (
                sink_addr(
                    &args.sink_stomp,
                    "--sink-stomp",
                    "not an address like 127.0.0.1:61614",
                ),
                sink_addr(
                    &args.sink_amqp,
                    "--sink-amqp",
                    "not an address like 127.0.0.1:5673",
                ),
            ) {
                (Ok(stomp), Ok(amqp)) => sink::serve(stomp, amqp).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            if let Err(e) = result {
                eprintln!("weir perf: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
            return ExitCode::SUCCESS;
        }
        if let Some(count) = args.logins {
            return match run::logins(&args, count).await {
                Ok(summary) => {
                    println!("{}", summary.to_json());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("weir perf: {e}");
                    ExitCode::from(EXIT_ERROR)
                }
            };
        }
        match run::load(&args).await {
            Ok(summary) => {
                println!("{}", summary.to_json());
                if summary.violations() > 0 || summary.lost() > 0 {
                    if !args.json_only {
                        eprintln!(
                            "weir perf: {} lost, {} order violations, {} split groups, {} early",
                            summary.lost(),
                            summary.order_violations,
                            summary.split_groups,
                            summary.early
                        );
                    }
                    ExitCode::from(EXIT_VIOLATION)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("weir perf: {e}");
                ExitCode::from(EXIT_ERROR)
            }
        }
    })
}

/// The address of a `--sink-*` flag, if given.
fn sink_addr(
    value: &Option<String>,
    flag: &'static str,
    why: &'static str,
) -> Result<Option<std::net::SocketAddr>, PerfError> {
    value
        .as_deref()
        .map(|v| v.parse().map_err(|_| PerfError::BadArg { flag, why }))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: PerfArgs,
    }

    fn args(url: &str, extra: &[&str]) -> Result<PerfArgs, clap::Error> {
        let mut argv = vec!["perf", "--url", url, "--json-only", "--drain-timeout", "5"];
        argv.extend_from_slice(extra);
        Ok(Cli::try_parse_from(argv)?.args)
    }

    async fn sink() -> Result<String, PerfError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("stomp://{}", listener.local_addr()?);
        tokio::spawn(sink::stomp::serve_on(listener));
        Ok(url)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_message_crosses_the_sink_in_order() -> Result<(), Box<dyn std::error::Error>> {
        let url = sink().await?;
        let args = args(
            &url,
            &[
                "--messages",
                "3000",
                "--producers",
                "2",
                "--receipt-every",
                "100",
                "--ack",
                "client",
            ],
        )?;
        let summary = run::load(&args).await?;
        assert_eq!(summary.sent, 3000);
        assert_eq!(summary.received, 3000, "{}", summary.to_json());
        assert_eq!(summary.violations(), 0);
        assert!(summary.latency.len() == 3000);
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_bodies_cross_the_sink_whole() -> Result<(), Box<dyn std::error::Error>> {
        let url = sink().await?;
        for size in ["4096", "20000"] {
            let args = args(&url, &["--messages", "500", "--size", size])?;
            let summary = run::load(&args).await?;
            assert_eq!(summary.received, 500, "{size}: {}", summary.to_json());
            assert_eq!(summary.violations(), 0);
        }
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sink_splits_groups_and_the_check_sees_it() -> Result<(), Box<dyn std::error::Error>>
    {
        // The relay deals messages round robin with no notion of groups, so
        // with three consumers every group of ten lands on all: the check must say so.
        let url = sink().await?;
        let args = args(
            &url,
            &["--messages", "400", "--consumers", "3", "--groups", "10"],
        )?;
        let summary = run::load(&args).await?;
        assert_eq!(summary.received, 400);
        assert_eq!(summary.split_groups, 10);
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fixed_rate_run_takes_its_time_and_topics_fan_out(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let url = sink().await?;
        let args = args(
            &url,
            &[
                "--messages",
                "200",
                "--rate",
                "1000",
                "--topic",
                "t",
                "--consumers",
                "2",
            ],
        )?;
        let summary = run::load(&args).await?;
        assert_eq!(summary.expected, 400);
        assert_eq!(summary.received, 400);
        assert!(summary.send_seconds >= 0.19, "{}", summary.send_seconds);
        Ok(())
    }

    async fn amqp_sink() -> Result<String, PerfError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("amqp://{}", listener.local_addr()?);
        tokio::spawn(sink::amqp::serve_on(listener));
        Ok(url)
    }

    /// Runs `extra` against `url` and checks that all `count` messages came
    /// through, each consumer seeing each producer's messages in order.
    async fn all_in_order(
        url: &str,
        count: u64,
        extra: &[&str],
    ) -> Result<(), Box<dyn std::error::Error>> {
        let n = count.to_string();
        let mut argv = vec!["--messages", n.as_str()];
        argv.extend_from_slice(extra);
        let summary = run::load(&args(url, &argv)?).await?;
        let what = format!("{extra:?}: {}", summary.to_json());
        assert_eq!(summary.sent, count, "{what}");
        assert_eq!(summary.expected, count, "{what}");
        assert_eq!(summary.received, count, "{what}");
        assert_eq!(summary.lost(), 0, "{what}");
        assert_eq!(summary.foreign, 0, "{what}");
        assert_eq!(summary.violations(), 0, "{what}");
        assert_eq!(summary.latency.len(), count, "{what}");
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_message_crosses_the_amqp_sink_in_order() -> Result<(), Box<dyn std::error::Error>>
    {
        let url = amqp_sink().await?;
        // Unsettled sends (a window of 100 awaiting `accepted`), durable,
        // consumers settling in ranges; then pre-settled both ways.
        let unsettled = ["--persistent", "--receipt-every", "100", "--ack", "client"];
        let settled = ["--amqp-settled"];
        for (producers, consumers) in [("1", "1"), ("4", "4")] {
            for extra in [&unsettled[..], &settled[..]] {
                let mut argv = vec!["--producers", producers, "--consumers", consumers];
                argv.extend_from_slice(extra);
                // Each run on its own address, so a straggler of one cannot
                // pass for a message of the next.
                let queue = format!("q{producers}{}", extra.len());
                argv.extend_from_slice(&["--queue", &queue]);
                all_in_order(&url, 4000, &argv).await?;
            }
        }
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn consumers_short_of_credit_hold_their_producers_back(
    ) -> Result<(), Box<dyn std::error::Error>> {
        // Credit of 4 per consumer, topped up at 2: the producers outrun it
        // all the time, so deliveries wait in the sink for credit.
        let url = amqp_sink().await?;
        for extra in [
            &["--amqp-settled"][..],
            &["--persistent", "--ack", "client"][..],
        ] {
            let mut argv = vec!["--producers", "3", "--consumers", "2", "--prefetch", "4"];
            argv.extend_from_slice(extra);
            all_in_order(&url, 3000, &argv).await?;
        }
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_bodies_cross_the_amqp_sink_whole() -> Result<(), Box<dyn std::error::Error>> {
        let url = amqp_sink().await?;
        // 16 KiB is one frame; 1.5 MB is more than both sides' 1 MiB frames, so
        // the sink joins the producer's transfers and splits them again.
        for (size, count) in [("16384", 500), ("1500000", 12)] {
            all_in_order(
                &url,
                count,
                &["--size", size, "--persistent", "--queue", size],
            )
            .await?;
        }
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_topic_on_the_amqp_sink_reaches_every_consumer(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let url = amqp_sink().await?;
        let args = args(
            &url,
            &["--messages", "500", "--topic", "t", "--consumers", "3"],
        )?;
        let summary = run::load(&args).await?;
        assert_eq!(summary.expected, 1500);
        assert_eq!(summary.received, 1500, "{}", summary.to_json());
        assert_eq!(summary.violations(), 0);
        Ok(())
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("stomp://{}", listener.local_addr()?);
        drop(listener);
        assert!(run::load(&args(&url, &[])?).await.is_err());
        Ok(())
    }
}

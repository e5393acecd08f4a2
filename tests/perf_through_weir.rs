//! `weir perf` against Weir itself, in this process: the load generator's
//! AMQP client through the broker's endpoints, settled and unsettled,
//! grouped, and with bodies larger than a frame.

use clap::Parser;
use weir::perf::{run, PerfArgs};

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

/// A Weir broker in this process with only an AMQP acceptor on a free port.
async fn weir_amqp(
    dir: &std::path::Path,
) -> Result<(weir::server::Server, String), Box<dyn std::error::Error>> {
    let mut config = weir::config::Config::embedded_default();
    config.set_data_dir(dir.to_path_buf());
    config.set_stomp_addr(None);
    config.set_amqp_addr(Some("127.0.0.1:0".parse()?));
    config.set_http_addr(None);
    let broker = weir::server::open_broker(&config)?;
    let server = weir::server::Server::start(&config, broker).await?;
    let addr = server.bound.first().ok_or("no listener")?.1;
    Ok((server, format!("amqp://{addr}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_runs_through_weir_unsettled_settled_and_grouped(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (server, url) = weir_amqp(dir.path()).await?;
    // A window of 50 unsettled sends, durable, consumers settling in ranges.
    let unsettled = args(
        &url,
        &[
            "--messages",
            "2000",
            "--receipt-every",
            "50",
            "--persistent",
            "--ack",
            "client",
            "--prefetch",
            "64",
        ],
    )?;
    let summary = run::load(&unsettled).await?;
    assert_eq!(summary.received, 2000, "{}", summary.to_json());
    assert_eq!(summary.violations(), 0);
    // Pre-settled sends, pre-settled receipt, a topic with two consumers.
    let settled = args(
        &url,
        &[
            "--messages",
            "1000",
            "--amqp-settled",
            "--topic",
            "t",
            "--consumers",
            "2",
        ],
    )?;
    let summary = run::load(&settled).await?;
    assert_eq!(summary.expected, 2000);
    assert_eq!(summary.received, 2000, "{}", summary.to_json());
    // Groups over three consumers: Weir must keep every group on one.
    let grouped = args(
        &url,
        &[
            "--messages",
            "900",
            "--consumers",
            "3",
            "--groups",
            "30",
            "--queue",
            "g",
        ],
    )?;
    let summary = run::load(&grouped).await?;
    assert_eq!(summary.received, 900, "{}", summary.to_json());
    assert_eq!(summary.split_groups, 0);
    assert_eq!(summary.order_violations, 0);
    // Large bodies, queued uncopied on both sides: 1.5 MB is more than the
    // client's 1 MiB frames, so the broker splits those on the way out.
    for (size, count) in [("20000", 300), ("1500000", 20)] {
        let large = args(
            &url,
            &[
                "--messages",
                &count.to_string(),
                "--size",
                size,
                "--queue",
                "large",
            ],
        )?;
        let summary = run::load(&large).await?;
        assert_eq!(summary.received, count, "{size}: {}", summary.to_json());
        assert_eq!(summary.violations(), 0);
    }
    server.stop().await;
    Ok(())
}

//! The `weir` command: `weir serve` runs the broker.

mod admin {
    pub mod api;
    pub mod broker;
    pub mod schedule;
    pub mod user;
}
mod memory;

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use weir::config::Config;
use weir::server::{self, Server};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A message broker for STOMP and AMQP 1.0 clients"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (with the embedded default config unless --config is given).
    Serve(ServeArgs),
    /// Operate a running broker through its management API: queues, purge, move, groups,
    /// consumers, connections (tables, or --json).
    Admin(admin::broker::AdminArgs),
    /// List, cancel, reschedule or edit delayed messages: of the running broker through its
    /// management API, or with --data-dir in a stopped broker's data dir.
    Schedule(admin::schedule::ScheduleArgs),
    /// Make user entries for the config: `weir user add NAME` prints a [[users]] entry with
    /// a SCRAM credential of the password read from the terminal or stdin.
    User(admin::user::UserArgs),
    /// Load-test a STOMP or AMQP 1.0 broker (or serve the relay ceilings with
    /// --sink-stomp and --sink-amqp). Boxed: its many flags would make every variant as large.
    Perf(Box<weir::perf::PerfArgs>),
}

#[derive(Args)]
struct ServeArgs {
    /// TOML config file; see config/weir.toml for every setting.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where messages are stored (overrides broker.data_dir).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// STOMP listen address, e.g. 127.0.0.1:61613; "off" disables it.
    #[arg(long, value_name = "ADDR")]
    stomp: Option<String>,
    /// AMQP 1.0 listen address, e.g. 127.0.0.1:5672; "off" disables it.
    #[arg(long, value_name = "ADDR")]
    amqp: Option<String>,
    /// Management HTTP listen address, e.g. 127.0.0.1:8161; "off" disables it.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// STOMP over WebSocket listen address, e.g. 127.0.0.1:61614; "off" disables it
    /// (it is also served at /stomp on the HTTP listener).
    #[arg(long, value_name = "ADDR")]
    websocket: Option<String>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive.
    #[arg(long, value_name = "LEVEL", default_value = "info", env = "WEIR_LOG")]
    log: String,
    /// Validate the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Admin(args) => admin::broker::run(args),
        Command::Schedule(args) => admin::schedule::run(args),
        Command::User(args) => admin::user::run(args),
        Command::Perf(args) => weir::perf::main(*args),
    }
}

fn parse_addr(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "off" || value.is_empty() {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| format!("--{flag}: '{value}' is not an address like 127.0.0.1:61613"))
}

fn load_config(args: &ServeArgs) -> Result<Config, String> {
    let mut config = match &args.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded_default(),
    };
    if let Some(dir) = &args.data_dir {
        config.set_data_dir(dir.clone());
    }
    if let Some(stomp) = &args.stomp {
        config.set_stomp_addr(parse_addr("stomp", stomp)?);
    }
    if let Some(amqp) = &args.amqp {
        config.set_amqp_addr(parse_addr("amqp", amqp)?);
    }
    if let Some(http) = &args.http {
        config.set_http_addr(parse_addr("http", http)?);
    }
    if let Some(websocket) = &args.websocket {
        config.set_websocket_addr(parse_addr("websocket", websocket)?);
    }
    Ok(config)
}

fn serve(args: ServeArgs) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
    memory::tune_allocator();
    let config = match load_config(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // The TLS files are part of what a config check checks, and a bad one stops the start
    // before the store is opened.
    if let Some(Err(e)) = config.tls().map(server::tls::TlsContext::load) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    if args.check_config {
        println!("config ok");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.broker().worker_threads)
        .enable_all()
        .on_thread_park(memory::on_idle)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        // Health checks answer while the store is recovered.
        let early = match server::Early::start(&config).await {
            Ok(early) => early,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let broker = match server::open_broker_showing(&config, early.recovery()) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let server = match Server::start_after(&config, broker, early).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let nudge = tokio::spawn(memory::nudge_idle_workers());
        wait_for_signal(&server).await;
        nudge.abort();
        tracing::info!("shutting down");
        let drained = server.stop().await;
        // The store closes when its last handle goes, with the runtime: its writer
        // finishes every write submitted before it stops.
        tracing::info!(drained, "connections closed; flushing the store");
        ExitCode::SUCCESS
    })
}

/// Until SIGTERM or SIGINT; SIGHUP reloads the TLS certificates meanwhile.
async fn wait_for_signal(server: &Server) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let (Ok(mut term), Ok(mut hangup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => return,
                    _ = term.recv() => return,
                    _ = hangup.recv() => server.reload_tls(),
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = server;
    let _ = tokio::signal::ctrl_c().await;
}

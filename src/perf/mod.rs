//! `weir perf`: a load generator for STOMP brokers (AMQP 1.0 to follow behind
//! the same [`client`] traits), and `weir perf --sink-stomp`, the relay
//! ceiling it is compared with.

pub mod args;
pub mod client;
pub mod clock;
pub mod error;
pub mod run;
pub mod sink;
pub mod stats;

pub use args::PerfArgs;
pub use error::PerfError;

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
        if let Some(addr) = &args.sink_stomp {
            let result = match addr.parse() {
                Ok(addr) => sink::serve(addr).await,
                Err(_) => Err(PerfError::BadArg {
                    flag: "--sink-stomp",
                    why: "not an address like 127.0.0.1:61614",
                }),
            };
            if let Err(e) = result {
                eprintln!("weir perf: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
            return ExitCode::SUCCESS;
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

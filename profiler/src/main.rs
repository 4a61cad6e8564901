//! `profiler --pid N`: where every thread of one process spends its time, as one flame graph.
//!
//! `main` only parses arguments, sets up logging and the runtime, and turns an error into one
//! line and a non-zero exit; `app` runs the stages.

use clap::Parser as _;
use profiler::run::{app, cli};

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    let level = match args.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .filter_module("profiler", level)
        .filter_module("aya_log", level)
        .format_timestamp(None)
        .init();

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("profiler: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(app::run(args)) {
        Ok(None) => std::process::ExitCode::SUCCESS,
        // A launched command's status is the profiler's.
        Ok(Some(code)) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            // One line with the whole context chain.
            eprintln!("profiler: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

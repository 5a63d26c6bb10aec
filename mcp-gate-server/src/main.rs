//! The `mcp-gate-server` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// OAuth and fine-grained authorization in front of any MCP server, configured by one file.
#[derive(Debug, Parser)]
#[command(name = "mcp-gate-server", version, about)]
struct Options {
    /// The configuration file (TOML; see gateway.example.toml).
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Read and check the file (and the files it names), print what is wrong, and exit.
    #[arg(long)]
    check: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let options = Options::parse();
    if options.check {
        return match mcp_gate_server::serve::check(&options.config) {
            Ok(_) => {
                println!("{}: ok", options.config.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let stop = mcp_gate_server::serve::stop_signal();
    let running = match mcp_gate_server::serve::start(&options.config).await {
        Ok(running) => running,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("  listening:         {}", running.address);
    if let Some(operations) = running.operations {
        println!("  operations:        {operations}");
    }
    println!("Send SIGTERM (or press Ctrl-C) to stop; SIGHUP reloads the configuration.");
    stop.await;
    match running.shutdown(mcp_gate_server::serve::DRAIN).await {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

//! Log setup: RUST_LOG levels, by default `info` for DualFS and `warn` for everything else
//! (the libraries included).

use env_logger::{Builder, Env, Target, WriteStyle};
use std::fs::File;

const DEFAULT_FILTER: &str = "warn,dualfs=info";

/// Where log lines go.
pub enum LogTo {
    /// The terminal (or whatever stderr is).
    Stderr,
    /// A file given with --log-file, in the foreground.
    File(File),
    /// A daemon's stderr, which becomes its log file (or /dev/null) after the fork: never
    /// colour it, whatever the terminal at start-up could do.
    DaemonStderr,
}

pub fn init(to: LogTo) {
    let mut builder = Builder::from_env(Env::default().default_filter_or(DEFAULT_FILTER));
    match to {
        LogTo::Stderr => {}
        LogTo::File(file) => {
            builder.target(Target::Pipe(Box::new(file)));
            builder.write_style(WriteStyle::Never);
        }
        LogTo::DaemonStderr => {
            builder.write_style(WriteStyle::Never);
        }
    }
    // Fails only if a logger is already set, which this program never does twice.
    let _ = builder.try_init();
}

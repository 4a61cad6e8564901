//! What the reader reports when a JVM cannot be read.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum JvmError {
    #[error("{what} of process {pid}: {source}")]
    Io {
        pid: u32,
        what: String,
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Elf { path: PathBuf, error: object::Error },
    #[error("libjvm.so of process {pid} exports no symbol `{symbol}`")]
    MissingSymbol { pid: u32, symbol: &'static str },
    /// The JVM's tables lack something this reader needs: a JDK it does not know.
    #[error("unsupported JVM in process {pid}: its vmStructs have no {what}")]
    Unsupported { pid: u32, what: String },
    /// What was read does not look like what the tables describe (the JVM changed it while
    /// we read, or it is not what we think).
    #[error("process {pid}: {what}")]
    Invalid { pid: u32, what: String },
}

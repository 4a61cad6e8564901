//! Running commands so that a failure is one sentence.

use std::{
    env,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

/// The cargo that runs us (`$CARGO`), else the one on PATH.
pub fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs to completion with the terminal attached; fails with "`what` failed".
pub fn status(cmd: &mut Command, what: &str) -> Result<()> {
    let st = cmd
        .status()
        .with_context(|| format!("cannot start {what}"))?;
    if !st.success() {
        bail!("{what} failed");
    }
    Ok(())
}

/// Runs to completion; stdout on success, else one sentence with the stderr tail.
pub fn output(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let said = if stderr.trim().is_empty() {
            &stdout
        } else {
            &stderr
        };
        bail!(
            "{what} failed ({}); its stderr ends with: {}",
            out.status,
            tail(said, 5)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last `n` non-empty lines of `text`, joined into one line with " | ".
pub fn tail(text: &str, n: usize) -> String {
    let kept: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if kept.is_empty() {
        return "(nothing)".to_string();
    }
    kept[kept.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail_is_one_line() {
        assert_eq!(tail("a\n\nb\nc\n", 2), "b | c");
        assert_eq!(tail("", 5), "(nothing)");
    }

    #[test]
    fn a_failed_command_is_one_sentence_with_its_stderr() {
        let err = output(
            Command::new("sh").args(["-c", "echo starting >&2; echo 'no luck' >&2; exit 3"]),
            "the step",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "the step failed (exit status: 3); its stderr ends with: starting | no luck"
        );
    }
}

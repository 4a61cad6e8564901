//! Phase 3, post-processing time and memory: one 20 s wall capture of nginx (one instance on
//! the master, following both workers) under load
//! (wrk keeps running through the post-processing, as on a loaded server); the time comes
//! from the profiler's own `-v` log line, the peak RSS from `wait4`'s rusage.

use std::{
    fs,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

use crate::{
    nginx::wrk_command,
    process::{Instance, Ready, say, tail_of_lines},
    quiet::{ForeignCpu, gate},
    tools::{Bench, EXIT_TIMEOUT, SETTLE, cleanup_outputs},
};

pub struct Post {
    pub capture_secs: u64,
    /// From the profiler's `post-processing took X s` log line.
    pub logged_secs: Option<f64>,
    /// From outside: exit − (capturing line + capture length); an upper bound.
    pub measured_secs: f64,
    pub peak_rss_kib: u64,
    /// Other processes' share of the CPUs during the capture.
    pub foreign: f64,
}

/// One wall capture of `capture_secs` of nginx, under load.
pub fn post_processing(bench: &Bench, capture_secs: u64) -> Result<Post> {
    let master = bench.nginx.service;
    gate(&bench.quiet);
    // wrk starts first and outlives the capture: the profiler attaches, captures and
    // post-processes on a loaded machine, as it would in use.
    let mut wrk = Instance::spawn(
        "wrk".to_string(),
        wrk_command(bench.port, capture_secs + EXIT_TIMEOUT.as_secs() + 30),
    )?;
    thread::sleep(SETTLE);
    let svg = bench.dir.join("post.svg");
    let mut cmd = Command::new(&bench.binary);
    cmd.args([
        "--pid",
        &master.to_string(),
        "--secs",
        &capture_secs.to_string(),
    ])
    .args(["--mode", "wall", "-v", "-o"])
    .arg(&svg);
    let mut ours = Instance::spawn(
        format!("profiler --mode wall -v (on nginx master {master})"),
        cmd,
    )?;
    say(&format!(
        "post-processing: a {capture_secs} s wall capture of nginx (master {master}) under load"
    ));
    ours.wait_ready(Ready::StderrLine("profiler: capturing"))?;
    let capturing_at = ours
        .line_time("profiler: capturing")
        .unwrap_or_else(Instant::now);
    let others = ForeignCpu::start();
    let (status, usage) = ours.reap(Duration::from_secs(capture_secs) + EXIT_TIMEOUT)?;
    let exited_at = Instant::now();
    let foreign = others.fraction(exited_at.duration_since(capturing_at).as_secs_f64());
    wrk.interrupt();
    let _ = wrk.reap(Duration::from_secs(10));
    bench.log_reset();

    let lines = ours.lines();
    if !status.success() {
        bail!(
            "{} failed ({status}); its stderr ends with: {}",
            ours.what,
            tail_of_lines(&lines)
        );
    }
    if fs::metadata(&svg).map_or(true, |m| m.len() == 0) {
        bail!("{} wrote no SVG to {}", ours.what, svg.display());
    }
    let logged_secs = lines.iter().find_map(|l| {
        let rest = &l[l.find("post-processing took ")? + "post-processing took ".len()..];
        rest.split_whitespace().next()?.parse::<f64>().ok()
    });
    let measured_secs = exited_at
        .saturating_duration_since(capturing_at)
        .as_secs_f64()
        - capture_secs as f64;
    cleanup_outputs(&bench.dir);
    Ok(Post {
        capture_secs,
        logged_secs,
        measured_secs: measured_secs.max(0.0),
        peak_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        foreign,
    })
}

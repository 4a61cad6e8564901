//! `cargo xtask demo nginx|postgres [SECONDS]`: the README's write-ups, reproducible. Each
//! starts a private, real service on loopback, puts it under load, profiles it with ours
//! (nginx: one instance on the master, which follows both workers, next to offcputime on each
//! worker and `perf --call-graph dwarf` on both, in the same run; PostgreSQL: one backend),
//! and prints the figures the README quotes. Outputs go to target/demo/.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use xtask::{
    output,
    packages::{self, Package},
};

use crate::{
    nginx::{NGINX_WORKERS, Nginx, Scratch, wrk_command},
    postgres::Cluster,
    tools::PACKAGES,
};

/// The services there are write-ups of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Service {
    /// nginx under `wrk -t2 -c64`, next to offcputime and perf on the same worker.
    Nginx,
    /// A PostgreSQL backend under `pgbench -c 4 -j 2`.
    Postgres,
}

/// What the PostgreSQL demo runs (pgbench ships with the server).
const POSTGRES_PACKAGES: &[Package] = &[Package {
    binary: "/usr/lib/postgresql",
    name: "postgresql",
    why: "the database server and pgbench, its load generator",
}];

pub fn run(root: &Path, service: Service, secs: u64) -> Result<()> {
    let out = root.join("target/demo");
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    match service {
        Service::Nginx => nginx(root, &out, secs),
        Service::Postgres => postgres(root, &out, secs),
    }
}

fn say(what: &str) {
    eprintln!("demo: {what}");
}

/// Runs `cmd` in the background with stdout to `stdout_to` (or nowhere).
fn spawn(cmd: &mut Command, stdout_to: Option<&Path>, what: &str) -> Result<Child> {
    let stdout = match stdout_to {
        Some(p) => Stdio::from(
            fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ),
        None => Stdio::null(),
    };
    cmd.stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what}"))
}

fn finish(child: Child, what: &str) -> Result<()> {
    let out = child
        .wait_with_output()
        .with_context(|| format!("{what} did not finish"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        bail!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        );
    }
    Ok(())
}

/// Where one wall-mode capture of a demo writes: `<name>-wall.{folded,svg}`,
/// `<name>-report.md`, and the printed summary in `<name>-summary.txt`.
struct WallCapture {
    folded: PathBuf,
    svg: PathBuf,
    report: PathBuf,
    summary: PathBuf,
}

impl WallCapture {
    fn new(out: &Path, name: &str) -> Self {
        Self {
            folded: out.join(format!("{name}-wall.folded")),
            svg: out.join(format!("{name}-wall.svg")),
            report: out.join(format!("{name}-report.md")),
            summary: out.join(format!("{name}-summary.txt")),
        }
    }
}

/// Our profiler in wall mode on `pid` for `secs`, writing the SVG, folded stacks and report.
fn wall_command(
    profiler: &Path,
    pid: u32,
    secs: u64,
    svg: &Path,
    folded: &Path,
    report: &Path,
) -> Command {
    let mut cmd = Command::new(profiler);
    cmd.args(["--pid", &pid.to_string(), "--secs", &secs.to_string()])
        .args(["--mode", "wall", "-o"])
        .arg(svg)
        .arg("--folded")
        .arg(folded)
        .arg("--report")
        .arg(report);
    cmd
}

/// Share (0..1) of the counts of folded lines in `text` that `keep`, that also hold `frame`.
fn folded_share(text: &str, frame: &str, keep: impl Fn(&[&str]) -> bool) -> (f64, u64) {
    let (mut with, mut total) = (0u64, 0u64);
    for line in text.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.trim().parse::<u64>() else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        if !keep(&frames) {
            continue;
        }
        total += count;
        if frames.contains(&frame) {
            with += count;
        }
    }
    (
        if total == 0 {
            0.0
        } else {
            with as f64 / total as f64
        },
        total,
    )
}

/// Share of off-CPU time in libbpf-tools offcputime's output (blocks of frames, leaf first, a
/// `-  task (pid)` line, then microseconds) whose stack holds `frame`.
fn offcputime_share(text: &str, frame: &str) -> (f64, u64) {
    let (mut with, mut total) = (0u64, 0u64);
    for block in text.split("\n\n") {
        let lines: Vec<&str> = block
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let Some(count) = lines.last().and_then(|l| l.parse::<u64>().ok()) else {
            continue;
        };
        total += count;
        if lines
            .iter()
            .take_while(|l| !l.starts_with('-'))
            .any(|l| *l == frame)
        {
            with += count;
        }
    }
    (
        if total == 0 {
            0.0
        } else {
            with as f64 / total as f64
        },
        total,
    )
}

/// Share of `perf script` samples with `frame` on their stack.
fn perf_share(script: &str, frame: &str) -> (f64, u64) {
    let (mut with, mut total) = (0u64, 0u64);
    for sample in script.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        if lines.next().is_none() {
            continue;
        }
        total += 1;
        let hit = lines.any(|l| {
            l.split_whitespace()
                .nth(1)
                .map(|sym| sym.split('+').next() == Some(frame))
                .unwrap_or(false)
        });
        if hit {
            with += 1;
        }
    }
    (
        if total == 0 {
            0.0
        } else {
            with as f64 / total as f64
        },
        total,
    )
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

fn nginx(root: &Path, out: &Path, secs: u64) -> Result<()> {
    packages::ensure(PACKAGES)?;
    let profiler = xtask::build(root, false)?;
    let scratch = Scratch::create()?;
    let nginx = Nginx::start(&scratch.0, NGINX_WORKERS)?;
    let master = nginx.master();
    let workers = nginx.workers()?;
    let list = |pids: &[u32]| {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    say(&format!(
        "nginx on 127.0.0.1:{}, profiling master {master} and workers {workers:?} for {secs} s \
         under wrk",
        nginx.port
    ));
    let wrk = spawn(&mut wrk_command(nginx.port, secs + 8), None, "wrk")?;
    thread::sleep(Duration::from_secs(2));

    let WallCapture {
        folded,
        svg,
        report,
        summary,
    } = WallCapture::new(out, "nginx");
    let perf_data = out.join("nginx-perf.data");
    // One instance on the master; each process its own tower (`nginx-<pid>`), so the
    // workers' stacks can be told from the master's.
    let ours = spawn(
        wall_command(&profiler, master, secs, &svg, &folded, &report).arg("--per-process"),
        Some(&summary),
        "our profiler",
    )?;
    // offcputime takes one PID: one instance per worker.
    let mut offcputimes = Vec::new();
    for worker in &workers {
        let text = out.join(format!("nginx-offcputime-{worker}.txt"));
        let child = spawn(
            Command::new("/usr/sbin/offcputime").args([
                "-p",
                &worker.to_string(),
                &secs.to_string(),
            ]),
            Some(&text),
            "offcputime",
        )?;
        offcputimes.push((child, text));
    }
    let perf = spawn(
        Command::new("perf")
            .args([
                "record",
                "-F",
                "99",
                "--call-graph",
                "dwarf",
                "-p",
                &list(&workers),
                "-o",
            ])
            .arg(&perf_data)
            .args(["--", "sleep", &secs.to_string()]),
        None,
        "perf record",
    )?;
    finish(ours, "our profiler")?;
    let mut offcpu = String::new();
    for (child, text) in offcputimes {
        finish(child, "offcputime")?;
        offcpu.push_str(&fs::read_to_string(&text)?);
        offcpu.push_str("\n\n");
    }
    // perf exits non-zero when its target detaches; its data is what matters.
    let _ = perf.wait_with_output();
    let script = output(
        Command::new("perf").args(["script", "-i"]).arg(&perf_data),
        "perf script",
    )?;
    let _ = fs::remove_file(&perf_data);
    let _ = finish(wrk, "wrk");

    let ours_folded = fs::read_to_string(&folded)?;
    // The workers' stacks only, as offcputime and perf see them (the master sleeps in
    // sigsuspend throughout).
    let master_root = format!("nginx-{master}");
    let worker = |f: &[&str]| f.first().is_some_and(|root| *root != master_root);
    let is_off = |f: &[&str]| f.last().is_some_and(|l| l.starts_with("[off-cpu:"));
    let (ours_on, on_us) = folded_share(&ours_folded, "main", |f| worker(f) && !is_off(f));
    let (ours_off, off_us) = folded_share(&ours_folded, "main", |f| worker(f) && is_off(f));
    let (master_share, master_us) = folded_share(&ours_folded, "main", |f| !worker(f));
    let (bcc, bcc_us) = offcputime_share(&offcpu, "main");
    let (perf_on, perf_n) = perf_share(&script, "main");
    let epoll = folded_share(&ours_folded, "epoll_wait", |f| worker(f) && is_off(f)).0;
    let table = format!(
        "| {secs} s of nginx's {} workers under `wrk -t2 -c64` | stacks reaching `main` | measured over |\n\
         |---|---:|---:|\n\
         | ours, on-CPU (`--mode wall`, .eh_frame; one instance on the master) | {} | {:.2} s |\n\
         | ours, off-CPU | {} | {:.2} s |\n\
         | libbpf-tools `offcputime -p` (frame pointers; one instance per worker) | {} | {:.2} s |\n\
         | `perf record -F 99 --call-graph dwarf -p` both workers (on-CPU) | {} | {} samples |\n\n\
         The master, in the same capture: {} of its {:.2} s reach `main`. Share of the \
         workers' off-CPU time under `epoll_wait` (the sleep, and the wait for a CPU after its \
         wakeup): {}. Outputs: {}, {}.\n",
        workers.len(),
        pct(ours_on),
        on_us as f64 / 1e6,
        pct(ours_off),
        off_us as f64 / 1e6,
        pct(bcc),
        bcc_us as f64 / 1e6,
        pct(perf_on),
        perf_n,
        pct(master_share),
        master_us as f64 / 1e6,
        pct(epoll),
        svg.display(),
        report.display(),
    );
    fs::write(out.join("nginx.md"), &table)?;
    println!("{table}");
    print!("{}", fs::read_to_string(&summary).unwrap_or_default());
    drop(nginx);
    Ok(())
}

fn postgres(root: &Path, out: &Path, secs: u64) -> Result<()> {
    packages::ensure(POSTGRES_PACKAGES)?;
    let profiler = xtask::build(root, false)?;
    let scratch = Scratch::create()?;
    let pg = Cluster::start(&scratch.0.join("pg"))?;
    say("initialising pgbench tables (scale 10)");
    pg.init_tables()?;
    let load = pg.load(secs + 8)?;
    thread::sleep(Duration::from_secs(2));
    let backend = pg.pgbench_backends()?[0];
    say(&format!(
        "profiling PostgreSQL backend {backend} for {secs} s under pgbench -c 4"
    ));
    let WallCapture {
        folded,
        svg,
        report,
        summary,
    } = WallCapture::new(out, "postgres");
    let ours = spawn(
        &mut wall_command(&profiler, backend, secs, &svg, &folded, &report),
        Some(&summary),
        "our profiler",
    )?;
    finish(ours, "our profiler")?;
    load.finish()?;
    let text = fs::read_to_string(&folded)?;
    let io = |f: &[&str]| f.last() == Some(&"[off-cpu:io]");
    let (_, io_us) = folded_share(&text, "", io);
    let (fdatasync, _) = folded_share(&text, "XLogFlush", io);
    let figures = format!(
        "PostgreSQL backend under `pgbench -c 4 -j 2` (synchronous_commit=on), {secs} s: {:.2} s in \
         uninterruptible I/O, {} of it under `XLogFlush` (the commit's WAL flush). Outputs: {}, {}.\n",
        io_us as f64 / 1e6,
        pct(fdatasync),
        svg.display(),
        report.display()
    );
    fs::write(out.join("postgres.md"), &figures)?;
    println!("{figures}");
    print!("{}", fs::read_to_string(&summary).unwrap_or_default());
    drop(pg);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_folded_and_perf_stacks() {
        let folded =
            "nginx;main;a;[off-cpu:sleep] 30\nnginx;b;[off-cpu:sleep] 10\nnginx;main;c 5\n";
        let off = |f: &[&str]| f.last().is_some_and(|l| l.starts_with("[off-cpu:"));
        assert_eq!(folded_share(folded, "main", off), (0.75, 40));
        assert_eq!(folded_share(folded, "main", |f| !off(f)), (1.0, 5));
        let script = "nginx 1 [000] 1.0: cpu-clock:\n\t  55 f+0x1 (/x)\n\t  56 main+0x4 (/x)\n\n\
                      nginx 1 [000] 2.0: cpu-clock:\n\t  57 g+0x1 (/x)\n";
        assert_eq!(perf_share(script, "main"), (0.5, 2));
        let bcc = "    schedule\n    read\n    main\n    -                nginx (1)\n        300\n\n\
                   \x20   schedule\n    [unknown]\n    -                nginx (1)\n        100\n";
        assert_eq!(offcputime_share(bcc, "main"), (0.75, 400));
    }
}

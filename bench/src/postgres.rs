//! The PostgreSQL load: a private cluster (initdb in a scratch directory, Unix socket only,
//! `synchronous_commit=on`) with pgbench's tables at scale 10, and pgbench. The bench's
//! PostgreSQL phases and the PostgreSQL demo share it. Nothing depends on the system's
//! clusters or services.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use xtask::output;

use crate::{nginx::free_port, process::signal, quiet};

/// pgbench's clients and threads (`pgbench -c 4 -j 2`), and the table scale.
pub const CLIENTS: usize = 4;
pub const THREADS: usize = 2;
pub const SCALE: u32 = 10;

/// A private cluster, stopped (immediate) when dropped. The server runs as the `postgres`
/// user (it refuses root); pgbench and psql connect as that role over the cluster's own
/// socket directory with trust authentication, so they run as root and can be signalled.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

impl Cluster {
    pub fn start(dir: &Path) -> Result<Self> {
        let bin = fs::read_dir("/usr/lib/postgresql")
            .context("PostgreSQL is not installed (/usr/lib/postgresql)")?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists() && p.join("pgbench").exists())
            .context("no initdb and pgbench under /usr/lib/postgresql/*/bin")?;
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let port = free_port()?;
        let data = dir.join("data");
        step(
            Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir),
        )?;
        step(
            as_postgres(&bin.join("initdb"))
                .args(["-A", "trust", "-D"])
                .arg(&data),
        )?;
        let opts = format!(
            "-p {port} -k {} -c listen_addresses='' -c synchronous_commit=on",
            dir.display()
        );
        let cluster = Cluster {
            dir: dir.to_path_buf(),
            bin,
            port,
        };
        step(
            as_postgres(&cluster.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .args(["-o", &opts, "-l"])
                .arg(dir.join("log"))
                .args(["-w", "start"]),
        )?;
        // pg_ctl daemonizes the server out of the bench's process tree; its CPU time is the
        // load's, not other work that disturbs a run.
        quiet::adopt(cluster.postmaster()?);
        Ok(cluster)
    }

    /// `pgbench -i -q -s 10`.
    pub fn init_tables(&self) -> Result<()> {
        output(
            &mut self.pgbench(&["-i", "-q", "-s", &SCALE.to_string()]),
            "pgbench -i",
        )
        .map(|_| ())
    }

    /// pgbench with `args`, against this cluster's `postgres` database.
    pub fn pgbench(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin.join("pgbench"));
        cmd.arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(args)
            .arg("postgres");
        cmd
    }

    /// `pgbench -c 4 -j 2` for `secs`, in the background, stdout and stderr discarded.
    pub fn load(&self, secs: u64) -> Result<Load> {
        let child = self
            .pgbench(&[
                "-c",
                &CLIENTS.to_string(),
                "-j",
                &THREADS.to_string(),
                "-T",
                &secs.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start pgbench")?;
        Ok(Load { child })
    }

    /// One value from a query.
    fn query(&self, sql: &str) -> Result<String> {
        let out = output(
            Command::new(self.bin.join("psql"))
                .arg("-h")
                .arg(&self.dir)
                .args(["-p", &self.port.to_string(), "-U", "postgres", "-Atc", sql])
                .arg("postgres"),
            "psql",
        )?;
        Ok(out.trim().to_string())
    }

    /// The backends serving pgbench, once all its clients are connected (within 30 s).
    pub fn pgbench_backends(&self) -> Result<Vec<u32>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out =
                self.query("select pid from pg_stat_activity where application_name = 'pgbench'")?;
            let mut pids: Vec<u32> = out.lines().filter_map(|l| l.parse().ok()).collect();
            pids.sort_unstable();
            if pids.len() == CLIENTS {
                return Ok(pids);
            }
            if Instant::now() > deadline {
                bail!(
                    "pgbench has {} backends after 30 s, expected {CLIENTS}",
                    pids.len()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Transactions committed so far: pgbench's TPC-B script inserts one row into
    /// pgbench_history per transaction, so its row count is exact (statistics views are
    /// flushed only every second or so).
    pub fn transactions(&self) -> Result<u64> {
        let out = self.query("select count(*) from pgbench_history")?;
        out.parse()
            .with_context(|| format!("psql printed {out:?} for the transaction count"))
    }

    /// The postmaster: the first line of `postmaster.pid`.
    pub fn postmaster(&self) -> Result<u32> {
        let path = self.dir.join("data/postmaster.pid");
        let text =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("no PID in {}", path.display()))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

/// A running pgbench, killed when dropped.
pub struct Load {
    child: Child,
}

impl Load {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// Waits for it to end by itself.
    pub fn finish(mut self) -> Result<()> {
        let status = self.child.wait().context("pgbench did not finish")?;
        if !status.success() {
            bail!("pgbench failed ({status})");
        }
        Ok(())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (SIGSTOP) process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cmd` as the postgres user.
fn as_postgres(program: &Path) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"]).arg(program);
    cmd
}

fn step(cmd: &mut Command) -> Result<()> {
    output(cmd, "a PostgreSQL setup step").map(|_| ())
}

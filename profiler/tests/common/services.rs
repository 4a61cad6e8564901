//! Real services for the end-to-end tests, private to the test and stopped when dropped: an
//! nginx (master + 2 workers on a loopback port) and a PostgreSQL cluster (initdb in a
//! scratch directory, Unix socket only). Both are Debian's, which `cargo xtask test` installs.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// nginx with 2 workers serving 512 bytes on 127.0.0.1:`port`; SIGQUIT (graceful shutdown,
/// workers included) when dropped.
pub struct Nginx {
    child: Child,
    pub master: u32,
    pub workers: Vec<u32>,
    pub port: u16,
}

impl Nginx {
    pub fn start(dir: &Path) -> Nginx {
        Nginx::start_serving(dir, &format!("root {}/html;", dir.display()))
    }

    /// nginx as a reverse proxy to `upstream` (`host:port`), keeping 16 connections to it.
    pub fn start_proxy(dir: &Path, upstream: &str) -> Nginx {
        Nginx::start_serving(
            dir,
            &format!(
                "location / {{ proxy_pass http://up; proxy_http_version 1.1; \
                 proxy_set_header Connection \"\"; }} }} upstream up {{ server {upstream}; \
                 keepalive 16;"
            ),
        )
    }

    /// nginx whose one server has `body` (the `server` block's directives; a proxy closes it
    /// to add an `upstream` block beside it).
    fn start_serving(dir: &Path, body: &str) -> Nginx {
        std::fs::create_dir_all(dir.join("html")).unwrap();
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        std::fs::write(dir.join("html/index.html"), "x".repeat(512)).unwrap();
        let port = 18_000 + (std::process::id() % 2000) as u16;
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "worker_processes 2;\ndaemon off;\nmaster_process on;\npid {d}/nginx.pid;\n\
                 error_log {d}/logs/error.log;\nevents {{ worker_connections 1024; }}\n\
                 http {{ access_log off; server {{ listen 127.0.0.1:{port}; {body} }} }}\n",
                d = dir.display()
            ),
        )
        .unwrap();
        let child = Command::new("/usr/sbin/nginx")
            .args(["-c", conf.to_str().unwrap(), "-p", dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start nginx (the xtask installs it for the tests)");
        let master = child.id();
        let mut nginx = Nginx {
            child,
            master,
            workers: Vec::new(),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while nginx.workers.len() < 2 {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited at start: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "nginx has no 2 workers after 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
            nginx.workers = children(master);
        }
        assert_eq!(nginx.workers.len(), 2, "nginx workers: {:?}", nginx.workers);
        nginx
    }

    /// `wrk -t2 -c64` for `secs` against it, in the background (killed when dropped).
    pub fn load(&self, secs: u64) -> Killed {
        Killed(
            Command::new("/usr/bin/wrk")
                .args([
                    "-t2",
                    "-c64",
                    &format!("-d{secs}s"),
                    &format!("http://127.0.0.1:{}/", self.port),
                ])
                .stdout(Stdio::null())
                .spawn()
                .expect("start wrk (the xtask installs it for the tests)"),
        )
    }
}

/// A load generator, killed and reaped when dropped.
pub struct Killed(pub Child);

impl Killed {
    /// Waits for it to end by itself.
    pub fn wait(mut self) {
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the pid is our child's.
        unsafe { libc::kill(self.master as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A private PostgreSQL cluster with pgbench's tables (scale 10, as in the bench) and
/// `synchronous_commit=on`, so each transaction waits for its WAL flush; stopped (immediate)
/// when dropped. The server runs as `postgres` (it refuses root); pgbench connects over the
/// cluster's own socket directory.
pub struct Postgres {
    /// Kept for its lifetime: the cluster lives in it.
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
    port: u16,
}

/// pgbench's clients: one backend each.
pub const PGBENCH_CLIENTS: usize = 4;

impl Postgres {
    pub fn start() -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL is installed (the xtask installs it for the tests)")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists() && p.join("pgbench").exists())
            .expect("initdb and pgbench under /usr/lib/postgresql/*/bin");
        // Under /tmp: the postgres user must be able to reach it.
        let dir = tempfile::Builder::new()
            .prefix("profiler-pg-")
            .tempdir_in("/tmp")
            .expect("a scratch directory for the cluster");
        let root = dir.path().to_path_buf();
        let port = 20_000 + (std::process::id() % 2000) as u16;
        run(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&root));
        run(as_postgres(&bin.join("initdb"))
            .args(["-A", "trust", "-D"])
            .arg(root.join("data")));
        let pg = Postgres {
            _dir: dir,
            root,
            bin,
            port,
        };
        let opts = format!(
            "-p {port} -k {} -c listen_addresses='' -c synchronous_commit=on",
            pg.root.display()
        );
        run(as_postgres(&pg.bin.join("pg_ctl"))
            .arg("-D")
            .arg(pg.root.join("data"))
            .args(["-o", &opts, "-l"])
            .arg(pg.root.join("log"))
            .args(["-w", "start"]));
        run(&mut pg.pgbench(&["-i", "-q", "-s", "10"]));
        pg
    }

    fn pgbench(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin.join("pgbench"));
        cmd.arg("-h")
            .arg(&self.root)
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(args)
            .arg("postgres");
        cmd
    }

    /// `pgbench -c 4 -j 2 -T secs` in the background (killed when dropped); returns it once
    /// all its clients have a backend, with their PIDs.
    pub fn load(&self, secs: u64) -> (Killed, Vec<u32>) {
        self.load_with(PGBENCH_CLIENTS, 2, secs)
    }

    /// `pgbench -c clients -j jobs -T secs`, as [`Postgres::load`].
    pub fn load_with(&self, clients: usize, jobs: usize, secs: u64) -> (Killed, Vec<u32>) {
        let (n, clients, jobs) = (clients, clients.to_string(), jobs.to_string());
        let pgbench = Killed(
            self.pgbench(&["-c", &clients, "-j", &jobs, "-T", &secs.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start pgbench"),
        );
        let postmaster = self.postmaster();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Backends are the postmaster's children whose title names the client database
            // user; the auxiliary processes (checkpointer, walwriter …) are not.
            let backends: Vec<u32> = children(postmaster)
                .into_iter()
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| c.starts_with("postgres: postgres postgres"))
                })
                .collect();
            if backends.len() == n {
                return (pgbench, backends);
            }
            assert!(
                Instant::now() < deadline,
                "pgbench has {} backends after 20 s",
                backends.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The first line of `postmaster.pid`.
    pub fn postmaster(&self) -> u32 {
        let path = self.root.join("data/postmaster.pid");
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no PID in {}", path.display()))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.root.join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

fn as_postgres(program: &Path) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"]).arg(program);
    cmd
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

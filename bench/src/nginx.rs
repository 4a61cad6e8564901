//! The load: a private nginx serving a small static page on loopback, and wrk. The bench's
//! phases and the nginx demo share it.

use std::{
    fs,
    net::{Ipv4Addr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    process::{children, signal},
    tools::ProfiledService,
};

pub const WRK_THREADS: u32 = 2;
pub const WRK_CONNECTIONS: u32 = 64;
pub const NGINX_WORKERS: usize = 2;

/// Where the two sides run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Layout {
    /// Each side: nginx with [`NGINX_WORKERS`] workers under `wrk -t2 -c64`, all CPUs.
    Spread,
    /// Each side: one worker and `wrk -t1 -c32`, both sides on one CPU.
    OneCpu,
}

impl Layout {
    pub fn workers(self) -> usize {
        match self {
            Layout::Spread => NGINX_WORKERS,
            Layout::OneCpu => 1,
        }
    }

    /// wrk's threads and connections per side.
    pub fn wrk(self) -> (u32, u32) {
        match self {
            Layout::Spread => (WRK_THREADS, WRK_CONNECTIONS),
            Layout::OneCpu => (1, WRK_CONNECTIONS / 2),
        }
    }
}

/// A private directory for nginx's config, logs and the tools' outputs; removed at the end.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn create() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("profiler-bench-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("www"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A private nginx in the foreground (`daemon off`), on a free loopback port, with its own
/// config, pid file and logs; the system's nginx config and service are never touched.
/// Dropping it stops it, also when the bench fails half-way.
pub struct Nginx {
    master: Child,
    pub port: u16,
    worker_count: usize,
}

impl Nginx {
    pub fn start(dir: &Path, workers: usize) -> Result<Self> {
        let port = free_port()?;
        fs::write(
            dir.join("www/index.html"),
            "<!DOCTYPE html>\n<html><head><title>bench</title></head>\
             <body><p>A small static page for the profiler bench.</p></body></html>\n",
        )?;
        let conf = dir.join("nginx.conf");
        fs::write(&conf, nginx_config(dir, port, workers))?;
        let error_log = dir.join("error.log");
        let master = Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(&error_log)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start nginx")?;
        let nginx = Nginx {
            master,
            port,
            worker_count: workers,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err()
            || children(nginx.master.id()).len() < workers
        {
            if Instant::now() > deadline {
                bail!(
                    "nginx did not start listening on 127.0.0.1:{port} with {workers} \
                     workers within 10 s; its error log ends with: {}",
                    tail_of_file(&error_log)
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(nginx)
    }

    pub fn master(&self) -> u32 {
        self.master.id()
    }

    /// The master and its workers, as the tools profile them.
    pub fn target(&self) -> Result<ProfiledService> {
        Ok(ProfiledService {
            kind: "nginx master",
            service: self.master(),
            each: "nginx worker",
            processes: self.workers()?,
        })
    }

    pub fn workers(&self) -> Result<Vec<u32>> {
        let mut pids: Vec<u32> = children(self.master.id())
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        pids.sort_unstable();
        if pids.len() != self.worker_count {
            bail!(
                "nginx has {} workers, expected {}",
                pids.len(),
                self.worker_count
            );
        }
        Ok(pids)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let workers = children(self.master.id());
        signal(self.master.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.master.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        for (pid, _) in workers {
            signal(pid, libc::SIGKILL);
        }
        let _ = self.master.kill();
        let _ = self.master.wait();
    }
}

fn nginx_config(dir: &Path, port: u16, workers: usize) -> String {
    let d = dir.display();
    format!(
        "# Written by the profiler's bench; private to this run.
worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type text/html;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
    }}
}}
"
    )
}

pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

pub fn wrk_command(port: u16, secs: u64) -> Command {
    let mut cmd = Command::new("wrk");
    cmd.arg(format!("-t{WRK_THREADS}"))
        .arg(format!("-c{WRK_CONNECTIONS}"))
        .arg(format!("-d{secs}s"))
        .arg(format!("http://127.0.0.1:{port}/"));
    cmd
}

/// A load of `secs` (phases 2 and 3, and the warm-up); fails if wrk reports no rate.
pub fn run_wrk(port: u16, secs: u64) -> Result<()> {
    let out = xtask::output(&mut wrk_command(port, secs), "wrk")?;
    if !out.lines().any(|l| l.trim().starts_with("Requests/sec:")) {
        bail!("wrk printed no Requests/sec line: {}", xtask::tail(&out, 5));
    }
    Ok(())
}

fn tail_of_file(path: &Path) -> String {
    xtask::tail(&fs::read_to_string(path).unwrap_or_default(), 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_config_stays_in_its_directory() {
        let conf = nginx_config(Path::new("/tmp/x"), 8080, 2);
        assert!(conf.contains("listen 127.0.0.1:8080;"));
        assert!(conf.contains("pid /tmp/x/nginx.pid;"));
        assert!(conf.contains("daemon off;"));
        assert!(!conf.contains("/var/"));
    }
}

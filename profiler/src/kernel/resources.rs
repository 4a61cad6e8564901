//! Names what waits were on (`profiler_common::Resource`, as the kernel side first saw it)
//! from /proc, when the drainer first meets it: a file's path (the fd's link, checked against
//! the inode the kernel read), its mount point, file system and device (the process's
//! mountinfo); a socket's ends, and the process at the other end when it is on this machine
//! (the peer connection's inode in the process's network namespace's socket tables, and the
//! process holding that inode); a pipe's other end. Nothing of the target's is opened: only
//! links are read and inodes stat'ed.

use std::{
    collections::HashMap,
    fs,
    net::{Ipv4Addr, Ipv6Addr},
    os::unix::fs::MetadataExt,
};

use profiler_common::{Resource, resource_kind};

use crate::kernel::probes::ProbeError;
use profiler_core::model::{NamedResource, ResourceKind};

/// `AF_UNIX`, `AF_INET`, `AF_INET6` (include/linux/socket.h).
const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// The most fds of a process scanned for an inode whose fd was closed or reused.
const MAX_FDS_SCANNED: usize = 65_536;

/// The listening TCP ports the kernel side reads to tell a connection's service end
/// (`LISTENING`, a bit per port): set from this network namespace's /proc/net/tcp and tcp6
/// before the window and at every drain; a bit once set stays (a port that stops listening
/// during a capture is rare, and a stale bit only groups that port's connections as a
/// server's).
pub struct Listening {
    map: aya::maps::Array<aya::maps::MapData, u64>,
    bits: Vec<u64>,
    /// One process per network namespace of the targets (a container's service listens in
    /// its own): its /proc/PID/net tables are read too.
    namespaces: Vec<u32>,
    /// When the tables were last read: at most once a second, not at every drain (down to
    /// 25 ms apart), since /proc/net/tcp lists every connection of the namespace.
    read_at: Option<std::time::Instant>,
}

/// The least time between two reads of the listening ports.
const LISTENING_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Listening {
    pub fn take(probes: &mut crate::kernel::probes::Probes) -> Result<Self, ProbeError> {
        let name = profiler_common::names::MAP_LISTENING;
        let map = aya::maps::Array::try_from(probes.take_map(name)?)
            .map_err(|source| ProbeError::Map { name, source })?;
        let mut listening = Self {
            map,
            bits: vec![0; 1024],
            namespaces: Vec::new(),
            read_at: None,
        };
        listening.update();
        Ok(listening)
    }

    /// Reads the listening ports of the network namespaces of `pids` too, from now on.
    pub fn watch(&mut self, pids: impl IntoIterator<Item = u32>) {
        let mut seen: Vec<std::path::PathBuf> = Vec::new();
        for pid in pids {
            if let Ok(ns) = fs::read_link(format!("/proc/{pid}/ns/net"))
                && !seen.contains(&ns)
            {
                seen.push(ns);
                self.namespaces.push(pid);
            }
        }
        self.read_at = None;
        self.update();
    }

    /// Sets the bits of ports newly seen listening (one map write per changed word).
    pub fn update(&mut self) {
        if self.read_at.is_some_and(|t| t.elapsed() < LISTENING_EVERY) {
            return;
        }
        self.read_at = Some(std::time::Instant::now());
        let mut next = self.bits.clone();
        for pid in std::iter::once(0).chain(self.namespaces.iter().copied()) {
            for family in [AF_INET, AF_INET6] {
                for port in listening_ports(pid, family) {
                    next[usize::from(port / 64)] |= 1 << (port % 64);
                }
            }
        }
        for (i, (&new, old)) in next.iter().zip(self.bits.iter_mut()).enumerate() {
            if new != *old && self.map.set(i as u32, new, 0).is_ok() {
                *old = new;
            }
        }
    }
}

/// Names resources; remembers the holders of socket and pipe inodes it scanned for, until
/// the next batch.
#[derive(Default)]
pub struct Namer {
    /// `socket:[N]` / `pipe:[N]` inode → (pid, comm) of every process holding it, read once
    /// per batch that needs it.
    holders: Option<HashMap<(bool, u64), Vec<u32>>>,
}

impl Namer {
    /// Names a batch of resources first seen at one drain.
    pub fn name_all(&mut self, new: &[(u64, Resource)]) -> Vec<(u64, NamedResource)> {
        self.holders = None;
        new.iter().map(|(id, r)| (*id, self.name(r))).collect()
    }

    fn name(&mut self, r: &Resource) -> NamedResource {
        match r.kind {
            resource_kind::FILE => file(r),
            resource_kind::SOCKET => self.socket(r),
            resource_kind::PIPE => self.pipe(r),
            _ => other(r),
        }
    }

    /// Every process holding each socket and pipe inode (one scan of /proc/*/fd).
    fn holders(&mut self) -> &HashMap<(bool, u64), Vec<u32>> {
        self.holders.get_or_insert_with(scan_holders)
    }

    fn socket(&mut self, r: &Resource) -> NamedResource {
        let ip = r.family == AF_INET || r.family == AF_INET6;
        if !ip {
            return self.unix_socket(r);
        }
        let proto = match r.protocol {
            6 => "TCP".to_string(),
            17 => "UDP".to_string(),
            p => format!("IP protocol {p}"),
        };
        let local = endpoint(r.family, &r.local_addr, r.local_port);
        let peer = endpoint(r.family, &r.peer_addr, r.peer_port);
        let client = r.peer_port != 0 && is_client(r);
        let peer_process = if r.peer_port != 0 && is_local(r.family, &r.peer_addr) {
            self.peer_process(r)
        } else {
            None
        };
        let who = peer_process
            .as_ref()
            .map(|(pid, comm)| format!(" ({comm}, PID {pid})"))
            .unwrap_or_default();
        let text = if client {
            format!("{proto} → {peer}{who}")
        } else if r.peer_port == 0 {
            format!("{proto} {local} (listening)")
        } else {
            let host = address(r.family, &r.peer_addr);
            format!("{proto} {local} ← {host}{who}")
        };
        let mut n = NamedResource::new(ResourceKind::Socket, text);
        n.protocol = Some(proto);
        n.local = Some(local);
        n.peer = (r.peer_port != 0).then_some(peer);
        n.role = Some(if client { "client" } else { "server" }.into());
        if let Some((pid, comm)) = peer_process {
            n.peer_pid = Some(pid);
            n.peer_process = Some(comm);
        }
        n
    }

    /// The process at the other end of a connection on this machine: the socket whose local
    /// end is this one's peer (and peer this one's local end) in the target's network
    /// namespace, and who holds it.
    fn peer_process(&mut self, r: &Resource) -> Option<(u32, String)> {
        let table = match (r.family, r.protocol) {
            (AF_INET, 6) => "tcp",
            (AF_INET6, 6) => "tcp6",
            (AF_INET, 17) => "udp",
            (AF_INET6, 17) => "udp6",
            _ => return None,
        };
        let text = fs::read_to_string(format!("/proc/{}/net/{table}", r.tgid)).ok()?;
        let want_local = hex_endpoint(r.family, &r.peer_addr, r.peer_port);
        let want_peer = hex_endpoint(r.family, &r.local_addr, r.local_port);
        let inode = text.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.get(1)? == &want_local && f.get(2)? == &want_peer)
                .then(|| f.get(9)?.parse::<u64>().ok())
                .flatten()
        })?;
        let pid = *self.holders().get(&(true, inode))?.first()?;
        Some((pid, comm(pid)))
    }

    /// A Unix socket: its path, or its peer's (a client's end is unbound: the server's path
    /// is the name people know), and the process at the other end (the peer's inode from
    /// sock_diag, and who holds it).
    fn unix_socket(&mut self, r: &Resource) -> NamedResource {
        let peer = (r.family == AF_UNIX)
            .then(|| unix_diag::peer_inode(r.ino))
            .flatten();
        let path = unix_path(r.tgid, r.ino).or_else(|| unix_path(r.tgid, peer?));
        let holder = peer.and_then(|ino| {
            let pids = self.holders().get(&(true, ino))?;
            pids.iter()
                .copied()
                .find(|&p| p != r.tgid)
                .or(pids.first().copied())
        });
        let mut text = match &path {
            Some(path) => format!("Unix socket {path}"),
            None => unix_text(r),
        };
        if let Some(pid) = holder {
            text.push_str(&format!(" ({}, PID {pid})", comm(pid)));
        }
        let mut n = NamedResource::new(ResourceKind::Socket, text);
        n.protocol = Some(
            if r.family == AF_UNIX {
                "Unix"
            } else {
                "socket"
            }
            .into(),
        );
        n.path = path;
        if let Some(pid) = holder {
            n.peer_pid = Some(pid);
            n.peer_process = Some(comm(pid));
        }
        n
    }

    fn pipe(&mut self, r: &Resource) -> NamedResource {
        let others: Vec<u32> = self
            .holders()
            .get(&(false, r.ino))
            .map(|pids| pids.iter().copied().filter(|&p| p != r.tgid).collect())
            .unwrap_or_default();
        let text = match others.first() {
            Some(&pid) => format!("pipe ↔ {} (PID {pid})", comm(pid)),
            None => format!("pipe (inode {})", r.ino),
        };
        let mut n = NamedResource::new(ResourceKind::Pipe, text);
        if let Some(&pid) = others.first() {
            n.peer_pid = Some(pid);
            n.peer_process = Some(comm(pid));
        }
        n
    }
}

/// Which end is the service: a TCP end listening on its port on this machine is a server's
/// (whatever the numbers: a test server on an ephemeral port), else the lower port is the
/// service's, as the kernel side assumed when it grouped the connections.
fn is_client(r: &Resource) -> bool {
    if r.protocol == 6 {
        let listening = listening_ports(r.tgid, r.family);
        if listening.contains(&r.local_port) {
            return false;
        }
        if listening.contains(&r.peer_port) && is_local(r.family, &r.peer_addr) {
            return true;
        }
    }
    r.peer_port < r.local_port
}

/// The TCP ports something listens on in the process's network namespace (0: this one's).
fn listening_ports(tgid: u32, family: u16) -> Vec<u16> {
    let table = if family == AF_INET { "tcp" } else { "tcp6" };
    let path = if tgid == 0 {
        format!("/proc/net/{table}")
    } else {
        format!("/proc/{tgid}/net/{table}")
    };
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // `st` 0A: TCP_LISTEN.
            (f.get(3)? == &"0A")
                .then(|| u16::from_str_radix(f.get(1)?.rsplit_once(':')?.1, 16).ok())
                .flatten()
        })
        .collect()
}

/// A file: its path (checked against the inode; a closed or reused fd is looked for among
/// the process's other fds), mount point, file system and device.
fn file(r: &Resource) -> NamedResource {
    let path = path_of(r).unwrap_or_else(|| format!("inode {} on {}", r.ino, dev_text(r.dev)));
    let mount = mount_of(r.tgid, r.dev, &path);
    let text = match &mount {
        Some(m) => format!("{path} ({}, {})", m.fstype, short_source(&m.source)),
        None => path.clone(),
    };
    let mut n = NamedResource::new(ResourceKind::File, text);
    n.path = Some(path);
    if let Some(m) = mount {
        n.mount = Some(m.point);
        n.fstype = Some(m.fstype);
        n.device = Some(m.source);
    }
    n
}

fn other(r: &Resource) -> NamedResource {
    let link = fs::read_link(format!("/proc/{}/fd/{}", r.tgid, r.fd))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|_| same_inode(r, r.fd))
        .unwrap_or_else(|| format!("inode {} on {}", r.ino, dev_text(r.dev)));
    let mut n = NamedResource::new(ResourceKind::Other, link.clone());
    n.path = Some(link);
    n
}

/// The fd `fd` of the resource's process is still the inode the kernel saw.
fn same_inode(r: &Resource, fd: u32) -> bool {
    fs::metadata(format!("/proc/{}/fd/{fd}", r.tgid))
        .map(|m| m.ino() == r.ino && user_dev(r.dev) == m.dev())
        .unwrap_or(false)
}

fn path_of(r: &Resource) -> Option<String> {
    let link = |fd: u32| {
        fs::read_link(format!("/proc/{}/fd/{fd}", r.tgid))
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    };
    if same_inode(r, r.fd) {
        return link(r.fd);
    }
    let fds = fs::read_dir(format!("/proc/{}/fd", r.tgid)).ok()?;
    fds.filter_map(Result::ok)
        .take(MAX_FDS_SCANNED)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&fd| same_inode(r, fd))
        .and_then(link)
}

/// The kernel's `dev_t` (major << 20 | minor) as user space's (glibc's `makedev`).
fn user_dev(dev: u32) -> u64 {
    libc::makedev(dev >> 20, dev & 0xf_ffff)
}

fn dev_text(dev: u32) -> String {
    format!("{}:{}", dev >> 20, dev & 0xf_ffff)
}

struct Mount {
    point: String,
    fstype: String,
    source: String,
}

/// The mount of `path` on device `dev` in the process's mount namespace: the longest mount
/// point of that device that holds the path.
fn mount_of(tgid: u32, dev: u32, path: &str) -> Option<Mount> {
    let text = fs::read_to_string(format!("/proc/{tgid}/mountinfo")).ok()?;
    let want = dev_text(dev);
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            (l.get(2)? == &want).then(|| Mount {
                point: unescape(l.get(4).copied().unwrap_or("")),
                fstype: r.first().copied().unwrap_or("").to_string(),
                source: r.get(1).copied().unwrap_or("").to_string(),
            })
        })
        .filter(|m| path.starts_with(&m.point) || !path.starts_with('/'))
        .max_by_key(|m| m.point.len())
}

/// mountinfo escapes spaces and the like as octal (`\040`).
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&code, 8) {
                Ok(b) => out.push(b as char),
                Err(_) => out.push_str(&code),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `/dev/vda1` → `vda1`; an NFS export or a tmpfs's name as it is.
fn short_source(source: &str) -> &str {
    source.strip_prefix("/dev/").unwrap_or(source)
}

fn address(family: u16, addr: &[u8; 16]) -> String {
    if family == AF_INET {
        Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string()
    } else {
        let v6 = Ipv6Addr::from(*addr);
        match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        }
    }
}

fn endpoint(family: u16, addr: &[u8; 16], port: u16) -> String {
    let a = address(family, addr);
    if a.contains(':') {
        format!("[{a}]:{port}")
    } else {
        format!("{a}:{port}")
    }
}

/// On this machine: loopback, or an address of one of its interfaces (the same address as
/// this end's is the common case).
fn is_local(family: u16, addr: &[u8; 16]) -> bool {
    if family == AF_INET {
        return addr[0] == 127 || local_v4().contains(&[addr[0], addr[1], addr[2], addr[3]]);
    }
    let v6 = Ipv6Addr::from(*addr);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.is_loopback() || local_v4().contains(&v4.octets()),
        None => v6.is_loopback(),
    }
}

/// The machine's IPv4 addresses (/proc/net/fib_trie's local routes).
fn local_v4() -> Vec<[u8; 4]> {
    let Ok(text) = fs::read_to_string("/proc/net/fib_trie") else {
        return Vec::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[1].contains("/32 host LOCAL"))
        .filter_map(|w| {
            w[0].trim()
                .trim_start_matches("|-- ")
                .parse::<Ipv4Addr>()
                .ok()
        })
        .map(|a| a.octets())
        .collect()
}

/// An end as /proc/net/tcp writes it: the address as the kernel's words in hex, the port.
fn hex_endpoint(family: u16, addr: &[u8; 16], port: u16) -> String {
    let words = if family == AF_INET { 1 } else { 4 };
    let mut s = String::new();
    for w in 0..words {
        let b = &addr[w * 4..w * 4 + 4];
        s.push_str(&format!(
            "{:08X}",
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        ));
    }
    format!("{s}:{port:04X}")
}

/// Every process holding each socket (`true`) and pipe (`false`) inode.
fn scan_holders() -> HashMap<(bool, u64), Vec<u32>> {
    let mut out: HashMap<(bool, u64), Vec<u32>> = HashMap::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(Result::ok).take(MAX_FDS_SCANNED) {
            let Ok(link) = fs::read_link(fd.path()) else {
                continue;
            };
            let link = link.to_string_lossy();
            let inode = |prefix: &str| {
                link.strip_prefix(prefix)?
                    .strip_suffix(']')?
                    .parse::<u64>()
                    .ok()
            };
            let key = match (inode("socket:["), inode("pipe:[")) {
                (Some(i), _) => (true, i),
                (_, Some(i)) => (false, i),
                _ => continue,
            };
            let holders = out.entry(key).or_default();
            if !holders.contains(&pid) {
                holders.push(pid);
            }
        }
    }
    out
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A Unix socket's path (the listener's, for its connections) from /proc/net/unix.
fn unix_path(tgid: u32, ino: u64) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{tgid}/net/unix")).ok()?;
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(6)?.parse::<u64>().ok()? == ino)
            .then(|| f.get(7).map(|s| s.to_string()))
            .flatten()
    })
}

fn unix_text(r: &Resource) -> String {
    match unix_path(r.tgid, r.ino) {
        Some(path) => format!("Unix socket {path}"),
        None if r.family == AF_UNIX => format!("Unix socket (inode {})", r.ino),
        None => format!("socket (family {}, inode {})", r.family, r.ino),
    }
}

/// The peer of a Unix socket, by inode, from the kernel's sock_diag netlink interface
/// (include/uapi/linux/unix_diag.h): /proc/net/unix does not say who is connected to whom.
mod unix_diag {
    use std::mem::size_of;

    /// `NETLINK_SOCK_DIAG`, `SOCK_DIAG_BY_FAMILY`, `UDIAG_SHOW_PEER`, `UNIX_DIAG_PEER`.
    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const UDIAG_SHOW_PEER: u32 = 0x4;
    const UNIX_DIAG_PEER: u16 = 2;

    #[repr(C)]
    struct Request {
        header: libc::nlmsghdr,
        /// `struct unix_diag_req`.
        family: u8,
        protocol: u8,
        pad: u16,
        states: u32,
        ino: u32,
        show: u32,
        cookie: [u32; 2],
    }

    /// The inode of the socket connected to socket `ino` (this network namespace's).
    pub fn peer_inode(ino: u64) -> Option<u64> {
        let ino = u32::try_from(ino).ok()?;
        // SAFETY: plain socket(2); the fd is closed below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return None;
        }
        let answer = ask(fd, ino);
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
        answer
    }

    fn ask(fd: i32, ino: u32) -> Option<u64> {
        let req = Request {
            header: libc::nlmsghdr {
                nlmsg_len: size_of::<Request>() as u32,
                nlmsg_type: SOCK_DIAG_BY_FAMILY,
                nlmsg_flags: libc::NLM_F_REQUEST as u16,
                nlmsg_seq: 1,
                nlmsg_pid: 0,
            },
            family: libc::AF_UNIX as u8,
            protocol: 0,
            pad: 0,
            states: u32::MAX,
            ino,
            show: UDIAG_SHOW_PEER,
            // INET_DIAG_NOCOOKIE: look the socket up by inode alone.
            cookie: [u32::MAX, u32::MAX],
        };
        // SAFETY: sends the request struct's bytes.
        let sent =
            unsafe { libc::send(fd, (&req as *const Request).cast(), size_of::<Request>(), 0) };
        if sent < 0 {
            return None;
        }
        let mut buf = [0u8; 8192];
        // SAFETY: receives into our buffer.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        let reply = buf.get(..usize::try_from(n).ok()?)?;
        peer_attribute(reply)
    }

    /// `UNIX_DIAG_PEER` of the first message: after the header (16 bytes) and `struct
    /// unix_diag_msg` (16 bytes), attributes of (len u16, type u16, value) aligned to 4.
    fn peer_attribute(reply: &[u8]) -> Option<u64> {
        let u16_at = |at: usize| Some(u16::from_ne_bytes(reply.get(at..at + 2)?.try_into().ok()?));
        if u16_at(4)? != SOCK_DIAG_BY_FAMILY {
            return None;
        }
        let msg_len = u32::from_ne_bytes(reply.get(..4)?.try_into().ok()?) as usize;
        let mut at = 32;
        while at + 4 <= msg_len.min(reply.len()) {
            let (len, kind) = (u16_at(at)? as usize, u16_at(at + 2)?);
            if len < 4 {
                return None;
            }
            if kind == UNIX_DIAG_PEER {
                let v = reply.get(at + 4..at + 8)?;
                return Some(u64::from(u32::from_ne_bytes(v.try_into().ok()?)));
            }
            at += (len + 3) & !3;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_writes_an_ipv4_end_as_one_native_word_and_a_hex_port() {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(hex_endpoint(AF_INET, &addr, 5432), "0100007F:1538");
    }

    #[test]
    fn a_unix_socket_pairs_peer_is_found_by_inode() {
        use std::os::unix::net::UnixStream;
        let (a, b) = UnixStream::pair().expect("a socket pair");
        let ino = |s: &UnixStream| {
            use std::os::fd::AsRawFd as _;
            fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd()))
                .expect("stat the socket")
                .ino()
        };
        assert_eq!(unix_diag::peer_inode(ino(&a)), Some(ino(&b)));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/mnt/my\\040disk"), "/mnt/my disk");
    }

    #[test]
    fn kernel_dev_t_becomes_user_dev_t() {
        // 254:1 (vda1): major << 20 | minor in the kernel.
        assert_eq!(user_dev(254 << 20 | 1), libc::makedev(254, 1));
        assert_eq!(dev_text(254 << 20 | 1), "254:1");
    }

    #[test]
    fn a_file_of_this_process_is_named_with_its_mount() {
        use std::os::fd::AsRawFd as _;
        let dir = std::env::temp_dir().join(format!("resources-test-{}", std::process::id()));
        let f = fs::File::create(&dir).expect("create a scratch file");
        let meta = f.metadata().expect("stat it");
        let dev = ((libc::major(meta.dev()) as u32) << 20) | libc::minor(meta.dev()) as u32;
        let r = Resource {
            kind: resource_kind::FILE,
            tgid: std::process::id(),
            fd: f.as_raw_fd() as u32,
            dev,
            ino: meta.ino(),
            ..Resource::default()
        };
        let named = Namer::default().name_all(&[(1, r)]);
        let n = &named[0].1;
        assert_eq!(n.path.as_deref(), dir.to_str());
        assert!(n.fstype.is_some(), "{n:?}");
        assert!(n.text.starts_with(dir.to_str().unwrap_or("")), "{n:?}");
        drop(f);
        let _ = fs::remove_file(&dir);
    }
}

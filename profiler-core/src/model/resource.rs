//! What a wait was on, as the capture side named it from /proc when it first saw it: a file
//! (its path, mount point, file system and device), a socket (protocol, both ends, and the
//! process at the other end when it is on this machine), a pipe (the process at the other
//! end). Kept in the saved capture: a replay names it as the capture did.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    File,
    Socket,
    Pipe,
    Other,
}

/// One resource: a class of what waits were on (a file; the service a socket talks to; a
/// pipe), with what one case of it was when first seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamedResource {
    pub kind: ResourceKind,
    /// As the report shows it: `/var/lib/app/wal (ext4, vda1)`, `TCP → 127.0.0.1:5432
    /// (postgres, PID 812)`, `pipe ← writer (PID 77)`.
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The file's mount point, file system type and source (the block device, the NFS
    /// server's export).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fstype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// `TCP`, `UDP`, `Unix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `address:port` of this end and of the other end, as first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The service end of a socket: `peer` (a client's wait on a server) or `local` (a
    /// server's wait on its clients, or a listener).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The process at the other end, when it is on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_process: Option<String>,
}

impl NamedResource {
    /// A resource with only its kind and text.
    pub fn new(kind: ResourceKind, text: String) -> Self {
        Self {
            kind,
            text,
            path: None,
            mount: None,
            fstype: None,
            device: None,
            protocol: None,
            local: None,
            peer: None,
            role: None,
            peer_pid: None,
            peer_process: None,
        }
    }
}

//! A capture as a file (`--save PATH`): the accounted profile with its stacks already named
//! and what the report says about the capture, as gzipped JSON. `profiler replay` renders it
//! again and `profiler diff` compares two, without root and without the target.

use std::{
    fs::File,
    io::{BufReader, BufWriter, Read as _, Write},
    path::Path,
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{Profile, StackNames, Timeline};

/// Bumped when the layout changes incompatibly.
pub const SAVED_FORMAT: u32 = 1;

/// What the capture was of, beyond its time model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureMeta {
    /// Process name, the root frame of every stack.
    pub target: String,
    pub pid: u32,
    /// What the capture covers, in words (`nginx (PID 1200) with descendants`, a cgroup, a
    /// command).
    #[serde(default)]
    pub selection: String,
    /// Kernel release the capture ran on.
    pub kernel: String,
    /// Why the window closed early, if it did.
    pub ended_early: Option<String>,
    /// Wall-clock time the window opened, in nanoseconds since the Unix epoch (the window
    /// itself is on CLOCK_MONOTONIC). Absent from captures saved before it was recorded.
    #[serde(default)]
    pub started_unix_ns: Option<u64>,
    /// What the capture itself found worth saying (JIT names that could be stale), as data:
    /// render puts it into words.
    #[serde(default)]
    pub notes: Vec<CaptureNote>,
    /// The machine's CPUs and the processes that used them over the window (captures saved
    /// before it was recorded: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<super::Machine>,
    /// Set on a capture cut to a time range (`replay --from --to`): which part of the whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<CaptureRange>,
}

/// A part of a capture: seconds from the start of its window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureRange {
    pub from_s: f64,
    pub to_s: f64,
    /// The whole capture's length.
    pub of_s: f64,
}

/// Something the capture side found that the report must say. Saved with its figures, so
/// render words it (render/report/words.rs) and a later profiler can word it better.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum CaptureNote {
    /// A JVM's JIT put one Java method and then another at these many code addresses during
    /// the capture: frames there carry the later name.
    JitCodeReused {
        process: String,
        pid: u32,
        addresses: u64,
    },
    /// A JVM's code cache could not be read (the error, in words): JIT code compiled after the
    /// last good read is unnamed.
    CodeCacheUnreadable {
        process: String,
        pid: u32,
        error: String,
    },
    /// A JVM's stacks that stop inside Java code or at an unmapped address (their callers are
    /// missing), on the CPU and off it; a side is absent where it was at most 1 % of the time.
    PartialJavaStacks {
        process: String,
        pid: u32,
        on_cpu: Option<PartialTime>,
        off_cpu: Option<PartialTime>,
    },
    /// A note of a capture saved when notes were sentences: kept as written.
    #[serde(untagged)]
    Text(String),
}

/// Part of a time: `partial_ns` of `total_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialTime {
    pub partial_ns: u64,
    pub total_ns: u64,
}

impl PartialTime {
    pub fn pct(&self) -> f64 {
        100.0 * self.partial_ns as f64 / self.total_ns.max(1) as f64
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SavedCapture {
    pub format: u32,
    pub meta: CaptureMeta,
    pub profile: Profile,
    pub names: StackNames,
    /// When each thread waited where (absent from captures saved before it was recorded, or
    /// made with `--no-timeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

#[derive(Debug, Error)]
pub enum SavedError {
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path} is not a saved capture: {error}")]
    Format {
        path: String,
        error: serde_json::Error,
    },
    #[error(
        "{path} is a saved capture of format {found}; this profiler reads format {SAVED_FORMAT}"
    )]
    Version { path: String, found: u32 },
    #[error(
        "{path} is {what}, not a saved capture: it carries no capture length or mode; record \
         with --save PATH and give that file"
    )]
    NotACapture { path: String, what: &'static str },
}

/// What a file that is not a saved capture looks like it is: an SVG, or folded stacks
/// (`frame;frame 123` lines).
fn recognise(bytes: &[u8]) -> Option<&'static str> {
    let text = std::str::from_utf8(bytes).ok()?.trim_start();
    if text.starts_with("<?xml") || text.starts_with("<svg") {
        return Some("an SVG flame graph");
    }
    // JSON (a damaged capture) is not folded stacks, whatever its first line ends in.
    if text.starts_with('{') {
        return None;
    }
    let first = text.lines().next()?;
    let (stack, count) = first.trim_end().rsplit_once(' ')?;
    (!stack.is_empty() && count.parse::<u64>().is_ok()).then_some("a file of folded stacks")
}

impl SavedCapture {
    /// Writes gzipped JSON.
    pub fn write_to(&self, out: impl Write) -> std::io::Result<()> {
        let mut gz =
            flate2::write::GzEncoder::new(BufWriter::new(out), flate2::Compression::new(6));
        serde_json::to_writer(&mut gz, self).map_err(std::io::Error::other)?;
        gz.finish()?.flush()
    }

    /// Reads a file [`SavedCapture::write_to`] wrote (plain JSON is accepted too).
    pub fn load(path: &Path) -> Result<Self, SavedError> {
        let shown = path.display().to_string();
        let io = |error| SavedError::Io {
            path: shown.clone(),
            error,
        };
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|f| BufReader::new(f).read_to_end(&mut bytes))
            .map_err(io)?;
        let json = if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut text)
                .map_err(io)?;
            text
        } else {
            bytes
        };
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let version: Version =
            serde_json::from_slice(&json).map_err(|error| match recognise(&json) {
                Some(what) => SavedError::NotACapture {
                    path: shown.clone(),
                    what,
                },
                None => SavedError::Format {
                    path: shown.clone(),
                    error,
                },
            })?;
        if version.format != SAVED_FORMAT {
            return Err(SavedError::Version {
                path: shown,
                found: version.format,
            });
        }
        let mut saved: Self = serde_json::from_slice(&json)
            .map_err(|error| SavedError::Format { path: shown, error })?;
        // Saved before processes were recorded: everything is the capture's one process.
        let pid = saved.meta.pid;
        for e in saved.profile.entries.iter_mut().filter(|e| e.pid == 0) {
            e.pid = pid;
        }
        for t in saved.profile.threads.values_mut().filter(|t| t.pid == 0) {
            t.pid = pid;
        }
        Ok(saved)
    }
}

#[cfg(test)]
impl SavedCapture {
    /// A capture of the process `app` (PID 1), for tests.
    pub(crate) fn of_app(profile: Profile, names: StackNames, timeline: Option<Timeline>) -> Self {
        SavedCapture {
            format: SAVED_FORMAT,
            meta: CaptureMeta {
                target: "app".into(),
                pid: 1,
                ..CaptureMeta::default()
            },
            profile,
            names,
            timeline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_saved_as_sentences_are_read_as_text_and_notes_as_data_round_trip() {
        let old = r#"{"target": "java", "pid": 7, "kernel": "6.1", "ended_early": null,
                      "notes": ["java-7: 3 addresses of JIT code held one Java method and then another."]}"#;
        let meta: CaptureMeta = serde_json::from_str(old).expect("an old capture's meta");
        assert_eq!(
            meta.notes,
            [CaptureNote::Text(
                "java-7: 3 addresses of JIT code held one Java method and then another.".into()
            )]
        );
        let notes = vec![
            CaptureNote::JitCodeReused {
                process: "java".into(),
                pid: 7,
                addresses: 3,
            },
            CaptureNote::PartialJavaStacks {
                process: "java".into(),
                pid: 7,
                on_cpu: Some(PartialTime {
                    partial_ns: 5,
                    total_ns: 100,
                }),
                off_cpu: None,
            },
            CaptureNote::Text("as written".into()),
        ];
        let json = serde_json::to_string(&notes).unwrap();
        assert!(
            json.contains(r#"{"note":"jit_code_reused","process":"java""#),
            "{json}"
        );
        let back: Vec<CaptureNote> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, notes);
    }

    #[test]
    fn svg_and_folded_files_are_named_for_what_they_are() {
        assert_eq!(
            recognise(b"<?xml version=\"1.0\"?><svg/>"),
            Some("an SVG flame graph")
        );
        assert_eq!(
            recognise(b"app;main;spin 42\napp;main 1\n"),
            Some("a file of folded stacks")
        );
        assert_eq!(recognise(b"{\"format\": 1"), None);
        assert_eq!(recognise(&[0xff, 0xfe]), None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.folded");
        std::fs::write(&path, "app;main;spin 42\n").unwrap();
        let err = SavedCapture::load(&path).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "x.folded is a file of folded stacks, not a saved capture: it carries no capture \
                 length or mode; record with --save PATH and give that file"
            ),
            "{err}"
        );
    }
}

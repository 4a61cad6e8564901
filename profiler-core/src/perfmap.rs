//! JIT symbols from a perf map (`/tmp/perf-<pid>.map`, written by `jcmd <pid> Compiler.perfmap`,
//! Node's `--perf-basic-prof`, and others): one `START SIZE name` line per compiled method.

use std::{collections::HashMap, path::PathBuf};

#[derive(Clone, Debug, Default)]
pub struct PerfMap {
    /// (start, end, name), sorted by start.
    entries: Vec<(u64, u64, String)>,
    /// Methods inlined at a code address (a sampled pc or a return address minus one), from
    /// the outermost inlined one to the innermost, the compiled method itself left out: a
    /// JVM's own structures (`hotspot`) say so, a perf map file does not.
    inlined: HashMap<u64, Vec<String>>,
}

impl PerfMap {
    pub fn parse(text: &str) -> Self {
        let entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let name = parts.next()?.trim();
                (size > 0 && !name.is_empty())
                    .then(|| (start, start.saturating_add(size), name.to_string()))
            })
            .collect();
        Self::from_entries(entries)
    }

    /// (start, end, name) entries in the order they were written: a later one wins for the
    /// same start (code recompiled in place).
    pub fn from_entries(mut entries: Vec<(u64, u64, String)>) -> Self {
        entries.sort_by_key(|e| e.0);
        entries.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                std::mem::swap(later, earlier);
                true
            } else {
                false
            }
        });
        Self {
            entries,
            inlined: HashMap::new(),
        }
    }

    /// This map with the methods inlined at code addresses (see [`PerfMap::inlined_at`]).
    pub fn with_inlined(mut self, inlined: HashMap<u64, Vec<String>>) -> Self {
        self.inlined = inlined;
        self
    }

    /// The methods inlined at `addr`, outermost first, the compiled method left out; empty
    /// where none are known.
    pub fn inlined_at(&self, addr: u64) -> &[String] {
        self.inlined.get(&addr).map_or(&[], Vec::as_slice)
    }

    /// Reads the target's perf map, as the target sees `/tmp` (containers included).
    pub fn load(pid: u32) -> Self {
        let nspid = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|v| v.split_whitespace().last().map(str::to_string))
            })
            .unwrap_or_else(|| pid.to_string());
        let candidates = [
            PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{nspid}.map")),
            PathBuf::from(format!("/tmp/perf-{pid}.map")),
        ];
        candidates
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|text| Self::parse(&text))
            .unwrap_or_default()
    }

    /// This map's entries and then `later`'s (which win for the same start).
    pub fn merged(self, later: PerfMap) -> Self {
        let mut entries = self.entries;
        entries.extend(later.entries);
        let mut inlined = self.inlined;
        inlined.extend(later.inlined);
        Self::from_entries(entries).with_inlined(inlined)
    }

    pub fn find(&self, addr: u64) -> Option<&str> {
        let at = self.entries.partition_point(|e| e.0 <= addr);
        let (_, end, name) = self.entries.get(at.checked_sub(1)?)?;
        (addr < *end).then_some(name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_jit_methods_and_ignores_junk() {
        let map = PerfMap::parse(
            "7f0000001000 40 Interpreter\n\
             0x7f0000002000 0x100 LFoo;::bar (compiled)\n\
             garbage line\n\
             7f0000003000 0 empty\n",
        );
        assert_eq!(map.find(0x7f0000001000), Some("Interpreter"));
        assert_eq!(map.find(0x7f000000103f), Some("Interpreter"));
        assert_eq!(map.find(0x7f0000001040), None);
        assert_eq!(map.find(0x7f00000020ff), Some("LFoo;::bar (compiled)"));
        assert_eq!(map.find(0x7f0000003000), None);
    }

    #[test]
    fn the_latest_entry_for_an_address_wins() {
        let map = PerfMap::parse("1000 10 old\n1000 10 new\n");
        assert_eq!(map.find(0x1008), Some("new"));
    }
}

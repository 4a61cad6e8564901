//! The timeline ring (`TIMELINE`) → [`RawTimeline`]: the kernel's records of long waits and
//! on-CPU samples, read at every drain while the capture runs and once more after it. At most
//! `--timeline-max-records` are kept; the rest are counted (`TimelineDropped`).

use aya::maps::{MapData, RingBuf};
use profiler_common::{TimelineGoWait, TimelineSample, TimelineWait, names, timeline_kind};

use crate::kernel::probes::{ProbeError, Probes};
use profiler_core::model::RawTimeline;

pub struct TimelineReader {
    ring: RingBuf<MapData>,
    max_records: u64,
    kept: RawTimeline,
    /// Records read beyond `max_records`, or not of a known kind and size.
    pub dropped: u64,
}

impl TimelineReader {
    /// Takes the ring out of `probes`; `resolution_ns` is what the programs were loaded with.
    pub fn new(
        probes: &mut Probes,
        resolution_ns: u64,
        max_records: u64,
    ) -> Result<Self, ProbeError> {
        let map = probes.take_map(names::MAP_TIMELINE)?;
        let ring = RingBuf::try_from(map).map_err(|source| ProbeError::Map {
            name: names::MAP_TIMELINE,
            source,
        })?;
        Ok(Self {
            ring,
            max_records,
            kept: RawTimeline {
                enabled: true,
                resolution_ns,
                ..RawTimeline::default()
            },
            dropped: 0,
        })
    }

    /// Everything the ring holds now.
    pub fn read(&mut self) {
        while let Some(item) = self.ring.next() {
            let kept =
                (self.kept.waits.len() + self.kept.samples.len() + self.kept.go_waits.len()) as u64;
            if kept >= self.max_records {
                self.dropped += 1;
                continue;
            }
            match parse(&item) {
                Some(Record::Wait(w)) => self.kept.waits.push(w),
                Some(Record::Sample(s)) => self.kept.samples.push(s),
                Some(Record::GoWait(w)) => self.kept.go_waits.push(w),
                None => self.dropped += 1,
            }
        }
    }

    /// What was read, after one last read.
    pub fn finish(mut self) -> (RawTimeline, u64) {
        self.read();
        (self.kept, self.dropped)
    }
}

#[derive(Debug, PartialEq)]
enum Record {
    Wait(TimelineWait),
    Sample(TimelineSample),
    GoWait(TimelineGoWait),
}

/// One record as the programs wrote it: its kind first, then the struct of that kind.
fn parse(bytes: &[u8]) -> Option<Record> {
    let kind = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
    match kind {
        timeline_kind::WAIT if bytes.len() >= size_of::<TimelineWait>() => {
            // SAFETY: the slice holds a whole TimelineWait (checked above), a repr(C) struct of
            // integers for which any bytes are a value; read_unaligned takes any alignment.
            Some(Record::Wait(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast::<TimelineWait>())
            }))
        }
        timeline_kind::SAMPLE if bytes.len() >= size_of::<TimelineSample>() => {
            // SAFETY: as above, for a TimelineSample.
            Some(Record::Sample(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast::<TimelineSample>())
            }))
        }
        timeline_kind::GO_WAIT if bytes.len() >= size_of::<TimelineGoWait>() => {
            // SAFETY: as above, for a TimelineGoWait.
            Some(Record::GoWait(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast::<TimelineGoWait>())
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: reads the bytes of a repr(C) struct of integers without padding.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn records_are_read_by_their_kind() {
        let w = TimelineWait {
            kind: timeline_kind::WAIT,
            tid: 7,
            start_ns: 100,
            blocked_ns: 5_000_000,
            ..TimelineWait::default()
        };
        assert_eq!(parse(&bytes_of(&w)), Some(Record::Wait(w)));
        let s = TimelineSample {
            kind: timeline_kind::SAMPLE,
            tid: 8,
            ts_ns: 3,
            user_stack: 1,
            kernel_stack: 2,
        };
        assert_eq!(parse(&bytes_of(&s)), Some(Record::Sample(s)));
        // Short, or of no known kind.
        assert_eq!(parse(&bytes_of(&w)[..20]), None);
        assert_eq!(parse(&[9, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(parse(&[]), None);
    }
}

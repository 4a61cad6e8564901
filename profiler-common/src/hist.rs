//! Wait-time histograms: log2 with linear sub-buckets, per blocking site (SITE_HISTS) and for
//! run-queue delays (RUNQUEUE_HISTS).

/// Buckets of the wait-time histograms, see [`hist_bucket`].
pub const WAIT_HIST_BUCKETS: usize = 2 + HIST_OCTAVES * HIST_SUB_BUCKETS;

/// Powers of two covered: 2^10 ns (1 µs) up to 2^36 ns (69 s); longer waits share the last
/// bucket, whose values are bounded by the exact maximum.
pub const HIST_OCTAVES: usize = 26;

/// log2 of [`HIST_SUB_BUCKETS`].
pub const HIST_SUB_LOG2: u32 = 5;

/// Linear sub-buckets per power of two: a bucket is at most 1/32 (3.1 %) of its lower bound
/// wide, so a value read from its middle is within 1.6 %.
pub const HIST_SUB_BUCKETS: usize = 1 << HIST_SUB_LOG2;

/// log2 of the histogram's first bucket bound (1024 ns).
pub const HIST_MIN_LOG2: u32 = 10;

/// A histogram of wait durations, see [`hist_bucket`]. 3.3 KiB: kept per blocking site, not
/// per thread and site.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitHist {
    pub buckets: [u32; WAIT_HIST_BUCKETS],
}

impl Default for WaitHist {
    fn default() -> Self {
        Self {
            buckets: [0; WAIT_HIST_BUCKETS],
        }
    }
}

/// Saved as its non-empty buckets, `[[bucket, count], …]`.
#[cfg(feature = "serde")]
impl serde::Serialize for WaitHist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let used = self.buckets.iter().filter(|&&c| c != 0).count();
        let mut seq = s.serialize_seq(Some(used))?;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c != 0 {
                seq.serialize_element(&(i as u32, c))?;
            }
        }
        seq.end()
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for WaitHist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Buckets;
        impl<'de> serde::de::Visitor<'de> for Buckets {
            type Value = WaitHist;
            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a list of [bucket, count] pairs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<WaitHist, A::Error> {
                let mut h = WaitHist::default();
                while let Some((i, c)) = a.next_element::<(u32, u32)>()? {
                    let slot = h
                        .buckets
                        .get_mut(i as usize)
                        .ok_or_else(|| serde::de::Error::custom("histogram bucket out of range"))?;
                    *slot = c;
                }
                Ok(h)
            }
        }
        d.deserialize_seq(Buckets)
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), an array of u32 (834 of them: a multiple of 2, so no tail padding).
unsafe impl aya::Pod for WaitHist {}

/// Indexes of [`crate::names::MAP_RUNQUEUE_HISTS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunqueueHist {
    /// Waits for a CPU after a preemption.
    Preempted = 0,
    /// Waits for a CPU after a wakeup.
    Woken = 1,
}

impl RunqueueHist {
    pub const COUNT: u32 = 2;
}

/// Histogram bucket of a duration: a log2 histogram with [`HIST_SUB_BUCKETS`] linear
/// sub-buckets per power of two. Bucket 0 takes everything below 1 µs; bucket
/// `1 + 32·(e − 10) + s` takes `[2^e + s·2^(e−5), 2^e + (s+1)·2^(e−5))` ns; the last bucket
/// takes everything from 2^36 ns on.
#[inline(always)]
pub const fn hist_bucket(ns: u64) -> usize {
    if ns < (1 << HIST_MIN_LOG2) {
        return 0;
    }
    let e = log2_floor(ns);
    if e >= HIST_MIN_LOG2 + HIST_OCTAVES as u32 {
        return WAIT_HIST_BUCKETS - 1;
    }
    let sub = ((ns >> (e - HIST_SUB_LOG2)) & (HIST_SUB_BUCKETS as u64 - 1)) as usize;
    1 + (e - HIST_MIN_LOG2) as usize * HIST_SUB_BUCKETS + sub
}

/// Lower and upper bound (ns) of histogram bucket `i`; the last bucket's upper bound is its
/// lower bound (open-ended).
pub const fn hist_bucket_bounds(i: usize) -> (u64, u64) {
    if i == 0 {
        return (0, 1 << HIST_MIN_LOG2);
    }
    if i >= WAIT_HIST_BUCKETS - 1 {
        let lo = 1u64 << (HIST_MIN_LOG2 as usize + HIST_OCTAVES);
        return (lo, lo);
    }
    let e = HIST_MIN_LOG2 as usize + (i - 1) / HIST_SUB_BUCKETS;
    let sub = ((i - 1) % HIST_SUB_BUCKETS) as u64;
    let step = 1u64 << (e - HIST_SUB_LOG2 as usize);
    let lo = (1u64 << e) + sub * step;
    (lo, lo + step)
}

/// `floor(log2(v))` for v > 0, as a fixed binary search because BPF has no
/// count-leading-zeros instruction.
#[inline(always)]
pub const fn log2_floor(v: u64) -> u32 {
    let mut v = v;
    let mut b = 0u32;
    if v >= 1 << 32 {
        v >>= 32;
        b += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        b += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        b += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        b += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        b += 2;
    }
    if v >= 1 << 1 {
        b += 1;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_floor_is_exact() {
        for b in 0..64 {
            assert_eq!(log2_floor(1u64 << b), b);
            if b > 0 {
                assert_eq!(log2_floor((1u64 << b) - 1), b - 1);
            }
        }
    }

    #[test]
    fn every_duration_falls_inside_its_bucket_bounds() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(1023), 0);
        assert_eq!(hist_bucket(1024), 1);
        // 20 ms = 2^24 + 0.19·2^24: octave 24, sub-bucket 6 of 32.
        assert_eq!(hist_bucket(20_000_000), 1 + 14 * 32 + 6);
        let mut ns = 1u64;
        while ns < (1 << 37) {
            for v in [ns, ns + ns / 3, ns * 2 - 1] {
                let b = hist_bucket(v);
                let (lo, hi) = hist_bucket_bounds(b);
                assert!(
                    v >= lo && (v < hi || b == WAIT_HIST_BUCKETS - 1),
                    "{v} in {b}: {lo}..{hi}"
                );
            }
            ns *= 2;
        }
        assert_eq!(hist_bucket(u64::MAX), WAIT_HIST_BUCKETS - 1);
        // Buckets tile the range without gaps.
        for b in 1..WAIT_HIST_BUCKETS - 1 {
            assert_eq!(hist_bucket_bounds(b - 1).1, hist_bucket_bounds(b).0);
        }
    }
}

//! Keys and values of the in-kernel aggregates: on-CPU samples (SAMPLES), waits per thread and
//! site (WAITS), sites (SITE_HISTS' keys) and wakers (WAKERS).

use crate::{kernel::COMM_LEN, state::WaitState};

/// Key of [`crate::names::MAP_SAMPLES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleKey {
    pub tid: u32,
    /// The drain epoch's parity ([`crate::Control::epoch`]); 0 once drained.
    pub epoch: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, explicit padding.
unsafe impl aya::Pod for SampleKey {}

/// Value of [`crate::names::MAP_SAMPLES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleValue {
    pub count: u64,
    /// Sum of the sample periods in nanoseconds (cpu-clock counts time), so on-CPU time can be
    /// expressed in microseconds whatever the sampling policy.
    pub period_ns: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for SampleValue {}

/// Key of [`crate::names::MAP_WAITS`]: one blocking site of one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaitKey {
    pub tid: u32,
    /// A [`crate::WaitState`].
    pub state: u16,
    /// The drain epoch's parity ([`crate::Control::epoch`]); 0 once drained.
    pub epoch: u16,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// What the wait was on ([`crate::Resource`]'s id; 0: no fd, or not recorded).
    pub resource: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes.
unsafe impl aya::Pod for WaitKey {}

/// Value of [`crate::names::MAP_WAITS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WaitValue {
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    /// Shortest wait: with the maximum, it bounds every percentile read from a histogram.
    pub min_ns: u64,
}

impl WaitValue {
    /// No wait yet: a minimum of `u64::MAX` and a maximum of 0 leave any wait's as they are.
    pub const EMPTY: WaitValue = WaitValue {
        total_ns: 0,
        count: 0,
        max_ns: 0,
        min_ns: u64::MAX,
    };
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for WaitValue {}

/// Value of [`crate::names::MAP_WAITS`] in the kernel: a blocking site's waits, and the time the
/// same waits then spent runnable before they got a CPU — which user space reads as the
/// site's [`crate::WaitState::RunqueueWoken`] entry. One entry, so a woken wait costs one hash
/// lookup, not two. (A key whose own state is a run-queue wait uses `wait` only.)
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WaitEntry {
    pub wait: WaitValue,
    pub runqueue: WaitValue,
}

impl WaitEntry {
    /// The entry as the waits it holds: its own, and its run-queue part under the same
    /// stacks with state [`crate::WaitState::RunqueueWoken`], if it has one.
    pub fn split(&self, key: WaitKey) -> impl Iterator<Item = (WaitKey, WaitValue)> {
        // The wait for a CPU after it is not on the resource.
        let runqueue_key = WaitKey {
            state: WaitState::RunqueueWoken as u16,
            resource: 0,
            ..key
        };
        let own = (self.wait.total_ns != 0 || self.wait.count != 0).then_some((key, self.wait));
        let runqueue = (self.runqueue.total_ns != 0 || self.runqueue.count != 0)
            .then_some((runqueue_key, self.runqueue));
        own.into_iter().chain(runqueue)
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), two WaitValues: only u64 fields.
unsafe impl aya::Pod for WaitEntry {}

/// Key of [`crate::names::MAP_SITE_HISTS`]: a blocking site, all threads together (percentiles are
/// reported per site; per thread the exact count, total, minimum and maximum remain).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SiteKey {
    /// A [`crate::WaitState`].
    pub state: u32,
    /// The drain epoch's parity ([`crate::Control::epoch`]); 0 once drained (saved captures name
    /// the field `_pad`, as it was before epochs).
    #[cfg_attr(feature = "serde", serde(rename = "_pad"))]
    pub epoch: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields, explicit padding.
unsafe impl aya::Pod for SiteKey {}

/// Key of [`crate::names::MAP_WAKERS`]: one blocking site and one waker of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    pub tid: u32,
    /// A [`crate::WaitState`] (the blocking site's).
    pub state: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
    pub waker_tid: u32,
    pub waker_tgid: u32,
    pub waker_user_stack: u64,
    pub waker_kernel_stack: u64,
    /// A [`crate::waker_context`] value.
    pub waker_context: u32,
    /// The drain epoch's parity ([`crate::Control::epoch`]); 0 once drained.
    pub epoch: u32,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields, no padding holes.
unsafe impl aya::Pod for WakerKey {}

/// Value of [`crate::names::MAP_WAKERS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakerValue {
    /// Wakeups of the site by this waker.
    pub count: u64,
    /// Blocked time those wakeups ended (switch-out to wakeup).
    pub total_ns: u64,
    pub waker_comm: [u8; COMM_LEN],
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields and a byte array, no padding.
unsafe impl aya::Pod for WakerValue {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_entry_splits_into_its_wait_and_its_runqueue_part() {
        extern crate std;
        use std::vec::Vec;
        let key = WaitKey {
            tid: 7,
            state: WaitState::Sleep as u16,
            epoch: 0,
            user_stack: 3,
            kernel_stack: 4,
            resource: 5,
        };
        let part = |total_ns, count| WaitValue {
            total_ns,
            count,
            max_ns: total_ns,
            min_ns: total_ns,
        };
        let both = WaitEntry {
            wait: part(10, 1),
            runqueue: part(2, 1),
        };
        let split: Vec<_> = both.split(key).collect();
        let runqueue_key = WaitKey {
            state: WaitState::RunqueueWoken as u16,
            resource: 0,
            ..key
        };
        assert_eq!(split, [(key, part(10, 1)), (runqueue_key, part(2, 1))]);
        // Woken and on a CPU at once: the wait alone.
        let no_runqueue = WaitEntry {
            wait: part(10, 1),
            runqueue: WaitValue::EMPTY,
        };
        assert_eq!(
            no_runqueue.split(key).collect::<Vec<_>>(),
            [(key, part(10, 1))]
        );
        // Only the run-queue part (a preemption on the way to the sleep: time, no count).
        let uncounted = WaitEntry {
            wait: WaitValue {
                total_ns: 5,
                ..WaitValue::EMPTY
            },
            runqueue: WaitValue::EMPTY,
        };
        assert_eq!(uncounted.split(key).count(), 1, "uncounted time is kept");
        let runqueue_only = WaitEntry {
            wait: WaitValue::EMPTY,
            runqueue: part(2, 1),
        };
        assert_eq!(
            runqueue_only.split(key).collect::<Vec<_>>(),
            [(runqueue_key, part(2, 1))]
        );
    }
}

//! The machine's CPU counters at one instant: `/proc/stat`'s CPU line and every process's
//! user and system time from `/proc/PID/stat`. Read at the window's two ends (a few
//! milliseconds each, nothing per event); their difference is profiler-core's
//! [`Machine`]: how busy the CPUs were and what else used them.

use std::collections::{BTreeSet, HashMap};

use profiler_core::model::{Machine, MachineProcess, machine::MAX_PROCESSES};

/// The counters, in clock ticks.
pub struct MachineSnapshot {
    cpus: u32,
    /// user+nice, system+irq+softirq, iowait, steal, idle.
    cpu: [u64; 5],
    processes: HashMap<u32, (String, u64)>,
}

impl MachineSnapshot {
    /// None where /proc/stat cannot be read (then the report says nothing of the machine).
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let (cpus, cpu) = parse_stat(&stat)?;
        Some(Self {
            cpus,
            cpu,
            processes: processes(),
        })
    }

    /// The machine over the time from `self` to `end`; `targets` marks the profiled
    /// processes.
    pub fn until(&self, end: &MachineSnapshot, targets: &BTreeSet<u32>) -> Machine {
        let hz = clock_ticks();
        let d = |i: usize| end.cpu[i].saturating_sub(self.cpu[i]) as f64 / hz;
        let mut processes: Vec<MachineProcess> = end
            .processes
            .iter()
            .filter_map(|(&pid, (name, ticks))| {
                let (_, before) = self.processes.get(&pid)?;
                let cpu_s = ticks.saturating_sub(*before) as f64 / hz;
                (cpu_s > 0.0).then(|| MachineProcess {
                    pid,
                    name: name.clone(),
                    cpu_s,
                    target: targets.contains(&pid),
                })
            })
            .collect();
        processes.sort_by(|a, b| b.cpu_s.total_cmp(&a.cpu_s).then(a.pid.cmp(&b.pid)));
        processes.truncate(MAX_PROCESSES);
        let (user_s, system_s, iowait_s, steal_s, idle_s) = (d(0), d(1), d(2), d(3), d(4));
        Machine {
            cpus: end.cpus,
            window_s: (user_s + system_s + iowait_s + steal_s + idle_s)
                / f64::from(end.cpus.max(1)),
            user_s,
            system_s,
            iowait_s,
            steal_s,
            idle_s,
            processes,
        }
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// The online CPUs (`cpuN` lines) and the all-CPU line's ticks, summed into user, system,
/// iowait, steal and idle (proc(5): user nice system idle iowait irq softirq steal; guest
/// time is already in user).
fn parse_stat(stat: &str) -> Option<(u32, [u64; 5])> {
    let mut lines = stat.lines();
    let first = lines.next()?;
    let fields: Vec<u64> = first
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    let cpus = lines
        .take_while(|l| l.starts_with("cpu"))
        .filter(|l| l[3..].starts_with(|c: char| c.is_ascii_digit()))
        .count();
    let cpu = [
        field(0) + field(1),
        field(2) + field(5) + field(6),
        field(4),
        field(7),
        field(3),
    ];
    Some((u32::try_from(cpus).ok()?.max(1), cpu))
}

/// Every process's name and user + system ticks.
fn processes() -> HashMap<u32, (String, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_process(&stat)?))
        })
        .collect()
}

/// `pid (comm) state …`: the name and fields 14 and 15 of proc(5), utime and stime.
fn parse_process(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // Counted from the state, field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_and_the_cpus_are_read_from_proc_stat() {
        let stat = "cpu  100 5 40 800 20 3 2 30 0 0\ncpu0 50 2 20 400 10 1 1 15 0 0\n\
                    cpu1 50 3 20 400 10 2 1 15 0 0\nintr 1\n";
        assert_eq!(parse_stat(stat), Some((2, [105, 45, 20, 30, 800])));
    }

    #[test]
    fn a_process_line_gives_its_name_and_cpu_ticks_even_with_odd_names() {
        let stat = "812 (my (odd) name) S 1 812 812 0 -1 4194560 100 0 0 0 70 30 0 0 20 0 \
                    4 0 1000 1 1 1";
        assert_eq!(parse_process(stat), Some(("my (odd) name".into(), 100)));
    }

    #[test]
    fn the_machine_between_two_reads_of_this_one() {
        let a = MachineSnapshot::read().expect("/proc/stat");
        // Spun until this thread used 300 ms of CPU, not for 300 ms of wall time: on a
        // loaded machine (a CI run beside builds) the latter gave it less than 100 ms.
        let cpu_ms = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid clock id and a timespec to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
        };
        let start = cpu_ms();
        while cpu_ms() - start < 300.0 {
            std::hint::black_box(0u64);
        }
        let b = MachineSnapshot::read().expect("/proc/stat");
        let me = std::process::id();
        let m = a.until(&b, &[me].into_iter().collect());
        assert!(m.cpus >= 1 && m.window_s > 0.0, "{m:?}");
        let ours = m
            .processes
            .iter()
            .find(|p| p.pid == me)
            .expect("this process spun");
        assert!(ours.target && ours.cpu_s >= 0.1, "{ours:?}");
    }
}

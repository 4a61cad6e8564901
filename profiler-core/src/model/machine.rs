//! The machine around the target over the window: how busy its CPUs were and which processes
//! used them, from the kernel's own counters (`/proc/stat`, `/proc/PID/stat`) read at the
//! window's two ends — nothing per event. A capture saved without it reads as unknown.

use serde::{Deserialize, Serialize};

/// CPU time of the whole machine and of each process over the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Online CPUs.
    pub cpus: u32,
    /// The window's length as the counters saw it, in seconds (CPUs × this is the capacity).
    pub window_s: f64,
    /// Of the CPUs' time: user (and nice), system (with interrupts), I/O wait, steal, idle.
    pub user_s: f64,
    pub system_s: f64,
    pub iowait_s: f64,
    pub steal_s: f64,
    pub idle_s: f64,
    /// Processes alive at both ends with their CPU time between them, most first (at most
    /// [`MAX_PROCESSES`]).
    pub processes: Vec<MachineProcess>,
}

/// Processes kept in a capture's machine figures.
pub const MAX_PROCESSES: usize = 32;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineProcess {
    pub pid: u32,
    pub name: String,
    /// User and system CPU time over the window, its threads together.
    pub cpu_s: f64,
    /// One of the profiled processes.
    pub target: bool,
}

impl Machine {
    /// The CPUs' time over the window: what the shares are of.
    pub fn capacity_s(&self) -> f64 {
        self.user_s + self.system_s + self.iowait_s + self.steal_s + self.idle_s
    }

    /// Busy: user, system and steal (the hypervisor ran something else on a CPU the guest
    /// wanted), as % of the CPUs' time.
    pub fn busy_pct(&self) -> f64 {
        pct(
            self.user_s + self.system_s + self.steal_s,
            self.capacity_s(),
        )
    }

    /// A process's share of the CPUs' time.
    pub fn share_pct(&self, cpu_s: f64) -> f64 {
        pct(cpu_s, self.capacity_s())
    }

    /// CPU time per process name (a database's backends, a pool of workers are one), most
    /// first, with how many processes and whether any was a target.
    pub fn by_name(&self) -> Vec<(String, f64, usize, bool)> {
        let mut by: Vec<(String, f64, usize, bool)> = Vec::new();
        for p in &self.processes {
            match by.iter_mut().find(|b| b.0 == p.name) {
                Some(b) => {
                    b.1 += p.cpu_s;
                    b.2 += 1;
                    b.3 |= p.target;
                }
                None => by.push((p.name.clone(), p.cpu_s, 1, p.target)),
            }
        }
        by.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        by
    }
}

fn pct(part: f64, of: f64) -> f64 {
    if of > 0.0 { 100.0 * part / of } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_of_all_cpus_and_processes_of_one_name_add_up() {
        let p = |pid, name: &str, cpu_s, target| MachineProcess {
            pid,
            name: name.into(),
            cpu_s,
            target,
        };
        let m = Machine {
            cpus: 2,
            window_s: 10.0,
            user_s: 14.0,
            system_s: 5.0,
            iowait_s: 0.0,
            steal_s: 0.6,
            idle_s: 0.4,
            processes: vec![
                p(1, "java", 6.6, true),
                p(2, "postgres", 3.0, false),
                p(3, "postgres", 3.0, false),
                p(4, "wrk", 4.8, false),
            ],
        };
        assert_eq!(m.capacity_s(), 20.0);
        assert!((m.busy_pct() - 98.0).abs() < 1e-9);
        assert!((m.share_pct(6.6) - 33.0).abs() < 1e-9);
        let by = m.by_name();
        assert_eq!(by[0], ("java".into(), 6.6, 1, true));
        assert_eq!(by[1], ("postgres".into(), 6.0, 2, false));
    }
}

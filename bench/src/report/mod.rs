//! The bench's report, `target/bench/latest.md`: the setup, one table of medians next to
//! the goals per workload, and the facts behind them (means ± standard errors, how busy other
//! work kept the machine).
//!
//! One file per job: machine.rs (what the bench ran on), stats.rs (the statistics),
//! cells.rs (how a cell reads), and each phase's rows: throughput.rs, cost.rs, post.rs,
//! startup.rs. This file puts the page together: its title or header, the tables, the facts.

mod cells;
mod cost;
mod goservice;
mod machine;
mod post;
mod startup;
mod stats;
mod throughput;

#[cfg(test)]
mod tests;

use std::{fmt::Write as _, time::Duration};

use clap::ValueEnum as _;

pub use self::machine::Machine;
use self::{
    cells::{TABLE_HEAD, minutes},
    cost::cost_rows,
    post::post_rows,
    startup::startup_section,
    stats::{mean_se, median, min_max},
    throughput::throughput_rows,
};
use crate::{
    cost::Costs,
    nginx::{Layout, NGINX_WORKERS, WRK_CONNECTIONS, WRK_THREADS},
    post::Post,
    postgres,
    quiet::{FOREIGN_MAX, QUIET_BUSY, Quiet},
    sidebyside::{self, SideBySide},
    startup::Startup,
    throughput::Throughput,
    tools::Condition,
};

/// What was asked for, as the report states it.
pub struct Setup {
    /// As typed.
    pub command: String,
    pub rounds: usize,
    pub secs: u64,
    pub layout: Layout,
}

pub struct Report<'a> {
    pub setup: &'a Setup,
    pub machine: Machine,
    /// nginx's and PostgreSQL's throughput phases, where they ran.
    pub nginx: Option<&'a Throughput>,
    pub postgres: Option<&'a Throughput>,
    /// One per workload that ran.
    pub costs: &'a [Costs],
    pub post: Option<&'a Post>,
    pub startup: Option<&'a Startup>,
    pub go: Option<&'a crate::goservice::GoService>,
    /// One per workload the side-by-side phase ran on.
    pub side_by_side: &'a [SideBySide],
    pub quiet: &'a Quiet,
    pub took: Duration,
}

impl Report<'_> {
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        self.title(&mut md);
        let costs = |name: &str| self.costs.iter().find(|c| c.workload == name);
        if self.nginx.is_some() || costs("nginx").is_some() {
            md.push_str("\n#### nginx + wrk\n\n");
            md.push_str(TABLE_HEAD);
            if let Some(t) = self.nginx {
                throughput_rows(&mut md, t, "requests/s", true);
            }
            if let Some(c) = costs("nginx") {
                cost_rows(&mut md, c);
            }
            if let Some(p) = self.post {
                post_rows(&mut md, p);
            }
        }
        if self.postgres.is_some() || costs("postgres").is_some() {
            md.push_str("\n#### PostgreSQL + pgbench\n\n");
            md.push_str(TABLE_HEAD);
            if let Some(t) = self.postgres {
                throughput_rows(&mut md, t, "transactions/s", false);
            }
            if let Some(c) = costs("postgres") {
                cost_rows(&mut md, c);
            }
        }
        if let Some(c) = costs("fsync") {
            md.push_str("\n#### fsync-heavy (test workload `mixed`)\n\n");
            md.push_str(TABLE_HEAD);
            cost_rows(&mut md, c);
        }
        sidebyside::section(&mut md, self.side_by_side, &self.machine.host());
        if let Some(s) = self.startup {
            startup_section(&mut md, s);
        }
        if let Some(g) = self.go {
            goservice::go_section(&mut md, g, &self.setup.command, &self.machine.host());
        }
        self.facts(&mut md);
        md
    }

    /// Whether any phase but the start-up ran.
    fn overhead_ran(&self) -> bool {
        self.phases_ran() || !self.side_by_side.is_empty()
    }

    /// Whether the throughput or BPF cost phases ran, which the full header describes.
    fn phases_ran(&self) -> bool {
        self.nginx.is_some() || self.postgres.is_some() || !self.costs.is_empty()
    }

    /// The full header, or a title for the one phase that ran alone (start-up, side by side).
    fn title(&self, md: &mut String) {
        if self.phases_ran() {
            return self.header(md);
        }
        let what = if self.go.is_some() && self.startup.is_none() && self.side_by_side.is_empty() {
            return;
        } else if self.side_by_side.is_empty() {
            "Start-up"
        } else {
            "Side by side with the anchors"
        };
        let _ = writeln!(
            md,
            "### {what} (`{}`)\n\n{}",
            self.setup.command,
            self.machine.line()
        );
    }

    fn header(&self, md: &mut String) {
        let m = &self.machine;
        let o = self.setup;
        let (threads, connections) = o.layout.wrk();
        let _ = writeln!(
            md,
            "### Overhead next to the anchors (`{}`)\n\n\
             {}  \n\
             {}  \n\
             {} round(s) of {} s per condition, the order rotating. Throughput: two sides, \
             each tool profiling one (alternating), their load generators taking turns every \
             10 ms; nginx sides each with {} under its own `wrk -t{threads} -c{connections}`, \
             {}; PostgreSQL sides each a private cluster (scale {}, synchronous_commit on) \
             under its own `pgbench -c {} -j {}`. BPF cost: nginx with {NGINX_WORKERS} workers \
             under `wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS} -d{}s`; one PostgreSQL backend \
             under that pgbench; the test workload's `mixed` mode (write + fsync loop, a 20 ms \
             sleeper, a blocked reader, one spinner more than CPUs). Ours runs one instance on \
             the service (nginx's master, the postmaster; it follows the children), \
             offcputime and perf one per process. The whole bench took {}.",
            o.command,
            self.machine.line(),
            m.versions,
            o.rounds,
            o.secs,
            match o.layout {
                Layout::Spread => format!("{NGINX_WORKERS} workers"),
                Layout::OneCpu => "one worker".to_string(),
            },
            match o.layout {
                Layout::Spread => "all on all CPUs",
                Layout::OneCpu => "all four on one CPU (`--one-cpu`)",
            },
            postgres::SCALE,
            postgres::CLIENTS,
            postgres::THREADS,
            o.secs,
            minutes(self.took),
        );
    }

    /// What the table rests on, one fact a line.
    fn facts(&self, md: &mut String) {
        let mut facts = Vec::new();
        self.post_facts(&mut facts);
        self.throughput_facts(&mut facts);
        self.instance_facts(&mut facts);
        self.load_facts(&mut facts);
        md.push('\n');
        for f in facts {
            let _ = writeln!(md, "- {f}");
        }
    }

    /// The post-processing run: its time, logged and measured; other work during it.
    fn post_facts(&self, facts: &mut Vec<String>) {
        if let Some(p) = self.post {
            facts.push(match p.logged_secs {
                Some(s) => format!(
                    "Post-processing: {s:.3} s logged by the profiler (`-v`), ≤ {:.2} s \
                     measured from outside.",
                    p.measured_secs
                ),
                None => format!(
                    "Post-processing: no `post-processing took` line logged; {:.2} s measured \
                     from outside (exit − capture end).",
                    p.measured_secs
                ),
            });
            if p.foreign > FOREIGN_MAX {
                facts.push(format!(
                    "Other processes took {:.0} % of the CPUs during the post-processing run.",
                    p.foreign * 100.0
                ));
            }
        }
    }

    /// Each throughput phase's ratios, mean ± standard error per condition.
    fn throughput_facts(&self, facts: &mut Vec<String>) {
        for (name, t) in [("nginx", self.nginx), ("PostgreSQL", self.postgres)] {
            let Some(t) = t else { continue };
            let means: Vec<String> = Condition::ALL
                .into_iter()
                .filter_map(|cond| {
                    let (mean, se) = mean_se(&t.ratios(cond))?;
                    let name = cond
                        .to_possible_value()
                        .map_or("nothing attached".to_string(), |v| v.get_name().to_string());
                    Some(format!("{name} {mean:.3} ± {se:.3}"))
                })
                .collect();
            if !means.is_empty() {
                facts.push(format!(
                    "{name} throughput ratios, mean ± standard error over the rounds: {}.",
                    means.join(", ")
                ));
            }
        }
    }

    /// Where a tool ran several instances: what its per-event cost adds up.
    fn instance_facts(&self, facts: &mut Vec<String>) {
        for c in self.costs {
            for (owner, n) in &c.instances {
                if *n > 1 {
                    let per_run: Vec<String> = c
                        .programs
                        .iter()
                        .filter(|(k, _)| k.starts_with(owner.as_str()))
                        .map(|(k, cost)| {
                            format!(
                                "{} {:.0} ns",
                                &k[owner.len() + 1..],
                                median(&cost.ns_per_run)
                            )
                        })
                        .collect();
                    facts.push(format!(
                        "{}: {owner} ran {n} instances, each running its programs on every \
                         event; per event is all instances' run time ÷ the events one \
                         instance saw; per run of one instance's program: {}.",
                        c.workload,
                        per_run.join(", ")
                    ));
                }
            }
        }
    }

    /// How busy other work kept the machine, what the bench waited or repeated for, and a
    /// smoke test said so.
    fn load_facts(&self, facts: &mut Vec<String>) {
        let (q, o) = (self.quiet, self.setup);
        if !q.foreign.is_empty() {
            let (lo, hi) = min_max(&q.foreign);
            let (blo, bhi) = min_max(&q.busy_before);
            facts.push(format!(
                "Load from other work (other sessions' builds and tests): during the runs it \
                 took {:.0} % of the CPUs (median; {:.0}–{:.0} %); just before them, with \
                 nothing of the bench loaded, the CPUs were {:.0} % busy (median; {:.0}–{:.0} %).",
                median(&q.foreign) * 100.0,
                lo * 100.0,
                hi * 100.0,
                median(&q.busy_before) * 100.0,
                blo * 100.0,
                bhi * 100.0
            ));
        }
        if q.under_load {
            facts.push(
                "`--under-load`: no run waited for quiet CPUs and none was repeated.".to_string(),
            );
        }
        if !q.under_load {
            facts.push(format!(
                "Runs that first waited for the CPUs to be < {:.0} % busy: {} of {} ({} in all), \
             {} started while still up to {:.0} % busy.",
                QUIET_BUSY * 100.0,
                q.waited_runs,
                q.runs,
                minutes(q.waited),
                q.busy_runs,
                q.worst_busy * 100.0
            ));
            facts.push(format!(
                "Runs repeated because other processes took > {:.0} % of the CPUs: {}, {} kept at \
             the last attempt; the worst run kept had {:.1} %.",
                FOREIGN_MAX * 100.0,
                q.repeated,
                q.kept_disturbed,
                q.worst_foreign * 100.0
            ));
        }
        if o.rounds < 5 {
            facts.push(if self.overhead_ran() {
                format!(
                    "Only {} round(s) of {} s: a smoke test, not numbers for the README.",
                    o.rounds, o.secs
                )
            } else {
                format!(
                    "Only {} start-up run(s) per case: a smoke test, not numbers for the README.",
                    o.rounds
                )
            });
        }
    }
}

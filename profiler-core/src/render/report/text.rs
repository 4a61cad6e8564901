//! The report on the terminal: groups, idle threads, the top blocking sites of active
//! threads, the top on-CPU functions, the notes and the verdict (the summary's thread table
//! comes before it: render/summary.rs).

use std::io::{self, Write};

use super::{
    model::{Report, SiteRow},
    words::{IdleRuleWords, idle_rule, idle_text, latency_cells, paths, truncate, wakers_text},
};

/// The end-of-run text on the terminal.
pub fn write_text(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let mode = r.mode;
    if mode.traces_switches() {
        write_groups_text(r, out)?;
    }
    let ranked: Vec<&SiteRow> = r
        .top_blocking_sites
        .iter()
        .filter(|s| s.active_s > 0.0)
        .take(5)
        .collect();
    if mode.traces_switches() && !ranked.is_empty() {
        writeln!(
            out,
            "  top blocking sites of active threads (time of active threads, % of theirs; idle threads' time apart)"
        )?;
        let labels: Vec<(&str, String)> = ranked.iter().map(|s| (&*s.site, paths(s))).collect();
        let texts = site_texts(&labels, 56);
        for (s, (text, full)) in ranked.into_iter().zip(texts) {
            let [p50, _, p99, max] = latency_cells(&s.latency);
            let woken = if s.wakers.is_empty() {
                String::new()
            } else {
                format!("  woken by {}", wakers_text(&s.wakers))
            };
            let mut idle = if s.idle_s > 0.0 {
                format!("  idle {:.2} s", s.idle_s)
            } else {
                String::new()
            };
            if s.event_wait {
                idle.push_str("  (event wait)");
            }
            writeln!(
                out,
                "  {:>2}. {:<5} {:<56} {:>8.2} s {:>5.1} %{idle}  {:>6} waits  p50 {p50}  p99 {p99}  max {max}{woken}",
                s.rank, s.state, text, s.active_s, s.active_pct, s.waits
            )?;
            if let Some(full) = full {
                writeln!(out, "            = {full}")?;
            }
            if !s.resources.is_empty() {
                writeln!(
                    out,
                    "            on {}",
                    super::resources_text(&s.resources)
                )?;
            }
            if let Some(w) = &s.when {
                writeln!(out, "            when: {}", w.summary)?;
            }
        }
    }
    if !r.top_on_cpu_functions.is_empty() {
        writeln!(out, "  top on-CPU functions (self / total)")?;
        for f in r.top_on_cpu_functions.iter().take(5) {
            writeln!(
                out,
                "      {:<60} {:>5.1} % / {:>5.1} %",
                truncate(&f.function, 60),
                f.self_pct,
                f.total_pct
            )?;
        }
    }
    for n in &r.notes {
        writeln!(out, "  note     {n}")?;
    }
    for c in r.chains.iter().take(3) {
        writeln!(out, "  chain    {}", c.sentence())?;
    }
    write_goroutines_text(r, out)?;
    writeln!(out, "  verdict  {}", r.verdict)
}

/// Go processes: their goroutine groups (the three busiest, each with its two largest
/// sites), and those whose goroutines were not followed.
fn write_goroutines_text(r: &Report, out: &mut impl Write) -> io::Result<()> {
    for p in &r.go_processes {
        if let Some(why) = &p.unfollowed {
            writeln!(
                out,
                "  go       {} (PID {}, {}): goroutines not followed, {why}",
                p.name, p.pid, p.version
            )?;
        }
    }
    for g in r.goroutines.iter().take(3) {
        writeln!(
            out,
            "  go       {} in PID {}: on the CPU {:.3} s, waits {:.3} s with work, {:.3} s idle",
            g.subject, g.pid, g.on_cpu_s, g.wait_s, g.idle_wait_s
        )?;
        for s in g.sites.iter().take(2) {
            let [p50, _, p99, max] = latency_cells(&s.latency);
            writeln!(
                out,
                "           {:>5.1} %{} {}  ({} waits, p50 {p50}, p99 {p99}, max {max})",
                s.share_pct,
                if s.idle { " idle" } else { "" },
                truncate(&s.label, 90),
                s.waits
            )?;
        }
    }
    Ok(())
}

/// Groups (the five busiest) and idle threads, on the terminal.
fn write_groups_text(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.groups.iter().any(|g| g.idle_threads < g.thread_count) {
        write_active_groups_text(r, out)?;
    }
    if !r.idle_threads.is_empty() {
        let n: usize = r.idle_threads.iter().map(|i| i.thread_count).sum();
        writeln!(
            out,
            "  idle     {} ({}), by process and wait, not ranked:",
            crate::render::count(n as u64, "thread"),
            idle_rule(IdleRuleWords::Brief)
        )?;
        for i in r.idle_threads.iter().take(5) {
            writeln!(out, "           {}", idle_text(i))?;
        }
        if r.idle_threads.len() > 5 {
            writeln!(out, "           … {} more", r.idle_threads.len() - 5)?;
        }
    }
    Ok(())
}

fn write_active_groups_text(r: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "  {:<40} {:>9} {:>8} {:>9} {:>8} {:>8}  dominant wait",
        "group (% of its active threads' time)", "threads", "running", "runnable", "sleep", "io"
    )?;
    for g in r
        .groups
        .iter()
        .filter(|g| g.idle_threads < g.thread_count)
        .take(5)
    {
        let threads = if g.idle_threads > 0 {
            format!("{} ({} idle)", g.thread_count, g.idle_threads)
        } else {
            g.thread_count.to_string()
        };
        let wait = g.dominant_wait.as_ref().map_or(String::new(), |w| {
            format!("{:>5.1} % {} {}", w.share_pct, w.state, w.site)
        });
        writeln!(
            out,
            "  {:<40} {:>9} {:>7.1}% {:>8.1}% {:>7.1}% {:>7.1}%  {wait}",
            truncate(&g.name, 40),
            threads,
            g.running_pct,
            g.runnable_pct,
            g.sleep_pct,
            g.io_pct
        )?;
    }
    Ok(())
}

/// A site's label and its kernel-path count in `n` characters. Too long, the label keeps the
/// blocking call and the callers furthest up, which are what tells sites apart that share
/// the first ones: `__futex_abstimed_wait_common ← … ← LWLockAcquireOrWait`.
fn site_text(site: &str, suffix: &str, n: usize) -> String {
    let width = |s: &str| s.chars().count();
    let room = n.saturating_sub(width(suffix)).max(n / 2);
    let fitted = if width(site) <= room {
        site.to_string()
    } else {
        let parts: Vec<&str> = site.split(" ← ").collect();
        let mut kept = None;
        if parts.len() > 2 {
            // The leaf, then as many of the furthest callers as fit.
            for from in 2..parts.len() {
                let t = format!("{} ← … ← {}", parts[0], parts[from..].join(" ← "));
                if width(&t) <= room {
                    kept = Some(t);
                    break;
                }
            }
        }
        kept.unwrap_or_else(|| truncate(site, room))
    };
    truncate(&format!("{fitted}{suffix}"), n)
}

/// The shown sites' labels (with their suffixes) in `n` characters each, told apart: where
/// two different sites would read alike once shortened, another shortening that keeps a frame
/// they differ by is tried, and failing that the row is followed by its whole label (`= …`).
fn site_texts(sites: &[(&str, String)], n: usize) -> Vec<(String, Option<String>)> {
    let candidates: Vec<Vec<String>> = sites
        .iter()
        .map(|(site, suffix)| site_text_candidates(site, suffix, n))
        .collect();
    let mut texts: Vec<(String, Option<String>)> =
        candidates.iter().map(|c| (c[0].clone(), None)).collect();
    let clashes = |i: usize, t: &str, texts: &[(String, Option<String>)]| {
        (0..sites.len()).any(|j| j != i && sites[j].0 != sites[i].0 && texts[j].0 == t)
    };
    for i in 0..sites.len() {
        if !clashes(i, &texts[i].0, &texts) {
            continue;
        }
        match candidates[i].iter().find(|c| !clashes(i, c, &texts)) {
            Some(c) => texts[i].0 = c.clone(),
            None => texts[i].1 = Some(sites[i].0.to_string()),
        }
    }
    // A row whose twin found another text no longer needs its whole label.
    for i in 0..sites.len() {
        if texts[i].1.is_some() && !clashes(i, &texts[i].0, &texts) {
            texts[i].1 = None;
        }
    }
    texts
}

/// Ways to show `site` in `n` characters, the preferred (`site_text`) first, then those that
/// keep one middle frame and the last (`leaf ← … ← ProcSleep ← … ← heap_update`).
fn site_text_candidates(site: &str, suffix: &str, n: usize) -> Vec<String> {
    let mut out = vec![site_text(site, suffix, n)];
    let parts: Vec<&str> = site.split(" ← ").collect();
    let last = parts.len().saturating_sub(1);
    for i in (1..last.saturating_sub(1)).rev() {
        let before = if i > 1 { " ← … ← " } else { " ← " };
        let t = format!(
            "{}{before}{} ← … ← {}{suffix}",
            parts[0], parts[i], parts[last]
        );
        if t.chars().count() <= n && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_that_would_read_alike_once_shortened_are_told_apart() {
        // Seen on PostgreSQL: both shortened to `__futex_abstimed_wait_common ← … ← heap_update`.
        let long = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockAcquire ← ProcSleep \
                    ← LockAcquireExtended ← XactLockTableWait ← heap_update";
        let short = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockAcquire ← heap_update";
        let other = "fdatasync ← XLogFlush";
        let texts = site_texts(
            &[
                (long, String::new()),
                (other, " (6 kernel paths)".into()),
                (short, String::new()),
            ],
            56,
        );
        assert_eq!(
            texts[1],
            ("fdatasync ← XLogFlush (6 kernel paths)".into(), None)
        );
        // Nothing shorter than 56 tells them apart: each row is followed by its whole label.
        assert_eq!(texts[0].0, texts[2].0);
        assert_eq!(texts[0].1.as_deref(), Some(long));
        assert_eq!(texts[2].1.as_deref(), Some(short));
        // With more room, a middle frame does.
        let texts = site_texts(&[(long, String::new()), (short, String::new())], 64);
        assert_ne!(texts[0].0, texts[1].0, "{texts:?}");
        assert!(
            texts
                .iter()
                .all(|(t, full)| t.chars().count() <= 64 && full.is_none())
        );
        assert_eq!(
            site_text_candidates("a ← b ← c ← d", "", 80),
            ["a ← b ← c ← d", "a ← b ← … ← d"]
        );
        // The same site twice (never in one table, but) is no clash.
        let same = site_texts(&[(short, String::new()), (short, String::new())], 56);
        assert!(same.iter().all(|(_, full)| full.is_none()));
    }

    #[test]
    fn long_site_labels_keep_the_call_and_the_callers_that_tell_them_apart() {
        let a = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockAcquireOrWait";
        let b = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockWaitForVar";
        let (ta, tb) = (site_text(a, "", 56), site_text(b, "", 56));
        assert_eq!(tb, "__futex_abstimed_wait_common ← … ← LWLockWaitForVar");
        assert_ne!(ta, tb);
        assert_eq!(ta, "__futex_abstimed_wait_common ← … ← LWLockAcquireOrWait");
        assert_eq!(
            site_text("fdatasync ← XLogFlush", " (6 kernel paths)", 48),
            "fdatasync ← XLogFlush (6 kernel paths)"
        );
        let long = site_text(a, " (6 kernel paths)", 48);
        assert!(
            long.ends_with(" (6 kernel paths)") && long.chars().count() <= 48,
            "{long}"
        );
    }
}

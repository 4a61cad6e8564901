use super::*;

#[test]
fn the_start_up_alone_has_its_own_title_and_beside_the_overhead_its_own_table() {
    use crate::startup::{Logged, Run as StartupRun};
    let run = StartupRun {
        logged: Logged {
            load: 0.3,
            attach: 0.004,
            snapshot: 0.001,
            cpu: 0.35,
            user: 0.05,
            system: 0.3,
        },
        wall_to_window: 0.36,
        cpu_in_all: 0.5,
        foreign: 0.0,
    };
    let startup = Startup {
        idle: vec![run],
        busy: vec![run],
        nice: 0,
    };
    let setup = Setup {
        command: "cargo xtask bench --workloads startup".to_string(),
        rounds: 1,
        secs: 6,
        layout: Layout::Spread,
    };
    let machine = || Machine {
        kernel: "6.18".to_string(),
        cpus: 2,
        cpu_model: "AMD EPYC".to_string(),
        memory_gib: 23.5,
        versions: "nginx 1".to_string(),
        revision: "abc1234".to_string(),
    };
    let quiet = Quiet::default();
    let costs = [Costs {
        workload: "fsync",
        ..Costs::default()
    }];
    let report = |costs: &[Costs]| {
        Report {
            setup: &setup,
            machine: machine(),
            nginx: None,
            postgres: None,
            costs,
            post: None,
            startup: Some(&startup),
            go: None,
            side_by_side: &[],
            quiet: &quiet,
            took: Duration::from_secs(61),
        }
        .markdown()
    };
    let alone = report(&[]);
    assert!(
        alone.starts_with("### Start-up (`cargo xtask bench --workloads startup`)\n\n")
            && alone.contains(
                " · Linux 6.18 · 2 CPUs (AMD EPYC) · 23.5 GiB RAM · profiler at abc1234\n"
            )
            && !alone.contains("Overhead")
            && alone.contains("\n#### Start-up\n")
            && alone.contains("- Only 1 start-up run(s) per case: a smoke test"),
        "{alone}"
    );
    let both = report(&costs);
    assert!(
        both.starts_with("### Overhead next to the anchors")
            && both.contains("2 CPUs (AMD EPYC)")
            && both.contains("\n#### fsync-heavy")
            && both.contains("\n#### Start-up\n")
            && both.contains("- Only 1 round(s) of 6 s: a smoke test"),
        "{both}"
    );
}

#[test]
fn the_side_by_side_phase_alone_has_its_own_title_and_the_host_beside_its_table() {
    let setup = Setup {
        command: "cargo xtask bench --side-by-side".to_string(),
        rounds: 1,
        secs: 6,
        layout: Layout::Spread,
    };
    let machine = Machine {
        kernel: "6.18".to_string(),
        cpus: 2,
        cpu_model: "AMD EPYC".to_string(),
        memory_gib: 23.5,
        versions: "nginx 1".to_string(),
        revision: "abc1234".to_string(),
    };
    let quiet = Quiet::default();
    let sbs = [crate::sidebyside::SideBySide {
        workload: "fsync-heavy".to_string(),
        pairs: 1,
        secs: 3,
        rows: Vec::new(),
    }];
    let side_by_side = Report {
        setup: &setup,
        machine,
        nginx: None,
        postgres: None,
        costs: &[],
        post: None,
        startup: None,
        go: None,
        side_by_side: &sbs,
        quiet: &quiet,
        took: Duration::from_secs(61),
    }
    .markdown();
    assert!(
        side_by_side
            .starts_with("### Side by side with the anchors (`cargo xtask bench --side-by-side`)")
            && side_by_side.contains("Host: **2 CPUs, AMD EPYC, Linux 6.18**")
            && side_by_side.contains("- Only 1 round(s) of 6 s: a smoke test"),
        "{side_by_side}"
    );
}

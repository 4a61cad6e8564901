//! `profiler replay` and `profiler diff`: the render stage alone, from saved captures (no
//! root, no target).

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use crate::run::{
    cli::{DiffArgs, RangeArgs, ReplayArgs},
    outputs::{self, default_svg_name, open_outputs, report_format, write_report, write_text},
    preflight,
};
use profiler_core::{
    model::{Mode, SavedCapture},
    render::{self, DiffOptions, ReportTexts},
    timeline,
};

/// `profiler replay CAPTURE`: the render stage alone, from a saved capture.
pub fn replay(r: &ReplayArgs) -> Result<()> {
    let saved = in_range(SavedCapture::load(&r.capture)?, &r.range, &r.capture)?;
    let default_svg = default_svg_name(&saved.meta, saved.profile.mode);
    let outputs = open_outputs(&r.out, default_svg, None, saved.profile.mode)?;
    outputs::render(&saved, &r.out, outputs)
}

/// `profiler diff BEFORE AFTER`: two saved captures compared per second of capture; the
/// differential graph drawn on each, and what moved most.
pub fn diff(d: &DiffArgs) -> Result<()> {
    let before = in_range(SavedCapture::load(&d.before)?, &d.range, &d.before)?;
    let after = in_range(SavedCapture::load(&d.after)?, &d.range, &d.after)?;
    let top = usize::try_from(d.top).unwrap_or(usize::MAX);
    let rendered =
        render::render_diff(&before, &after, &DiffOptions { top }).with_context(|| {
            format!(
                "cannot compare {} with {}",
                d.before.display(),
                d.after.display()
            )
        })?;
    let svg_path = d
        .output
        .clone()
        .unwrap_or_else(|| default_diff_name(&after.meta.target, rendered.diff.mode));
    let before_svg_path = svg_path.with_extension("before.svg");
    let report_out = match &d.report {
        None => None,
        Some(path) => {
            let format = report_format(path)?;
            Some((preflight::open_output("the report", path)?, format))
        }
    };
    let folded_out = d
        .folded
        .as_deref()
        .map(|p| preflight::open_output("the folded stacks", p))
        .transpose()?;
    let after_svg = preflight::open_output("the flame graph", &svg_path)?;
    let before_svg = preflight::open_output("the flame graph", &before_svg_path)?;

    write_text(after_svg, "the flame graph", &rendered.after_svg)?;
    write_text(before_svg, "the flame graph", &rendered.before_svg)?;
    if let Some(out) = folded_out {
        let path = write_text(out, "the folded stacks", &rendered.folded_text())?;
        eprintln!(
            "profiler: wrote folded stacks (before after, µs/s) to {}",
            path.display()
        );
    }
    if let Some((output, format)) = report_out {
        write_report(output, rendered.report(format))?;
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(rendered.terminal()?.as_bytes())?;
    writeln!(
        stdout,
        "profiler: wrote the differential flame graphs to {} (drawn on after) and {} (drawn on before)",
        svg_path.display(),
        before_svg_path.display()
    )?;
    Ok(())
}

/// The capture cut to `--from`/`--to` when either is given.
fn in_range(saved: SavedCapture, range: &RangeArgs, path: &Path) -> Result<SavedCapture> {
    let Some((from, to)) = range.range() else {
        return Ok(saved);
    };
    timeline::range::slice(&saved, from, to)
        .with_context(|| format!("cannot cut {} to {from}–{to} s", path.display()))
}

/// `diff-nginx-wall.svg`: the after capture's target, in characters any file system takes.
fn default_diff_name(target: &str, mode: Mode) -> PathBuf {
    let name = preflight::file_name_safe(target);
    PathBuf::from(format!("diff-{name}-{}.svg", mode.name()))
}

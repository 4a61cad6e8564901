//! Every file a run writes: opened before anything is attached (a refusal costs nothing),
//! then, once the capture is rendered (profiler-core's render stage), written through a
//! buffer and put in place, each said on stderr, the summary on stdout.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result};

use crate::run::{
    cli::OutputArgs,
    preflight::{self, Output, PreflightError, Target},
};
use profiler_core::{
    fold::Folded,
    model::{CaptureMeta, Mode, SavedCapture},
    render::{self, RenderOptions, ReportFormat, ReportTexts, pprof},
};

/// The report's format, from its path's extension. A device, a FIFO or `/dev/stdout` has none
/// to go by: it gets Markdown, the format meant to be read.
pub fn report_format(path: &Path) -> Result<ReportFormat, PreflightError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("md") => Ok(ReportFormat::Markdown),
        Some("json") => Ok(ReportFormat::Json),
        Some("html" | "htm") => Ok(ReportFormat::Html),
        None if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) => {
            Ok(ReportFormat::Markdown)
        }
        _ => Err(PreflightError::ReportExtension(path.to_path_buf())),
    }
}

/// Every file the run writes, opened before anything is attached.
pub struct Outputs {
    svg: Output,
    folded: Option<Output>,
    report: Option<(Output, ReportFormat)>,
    wakers_svg: Option<Output>,
    wakers_folded: Option<Output>,
    saved: Option<Output>,
    pprof: Option<Output>,
    timeline: Option<Output>,
}

impl Outputs {
    pub fn temp_paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<&Output> = vec![&self.svg];
        all.extend(self.folded.iter());
        all.extend(self.report.iter().map(|(o, _)| o));
        all.extend(self.wakers_svg.iter());
        all.extend(self.wakers_folded.iter());
        all.extend(self.saved.iter());
        all.extend(self.pprof.iter());
        all.extend(self.timeline.iter());
        all.iter()
            .filter_map(|o| o.temp_path())
            .map(Path::to_path_buf)
            .collect()
    }
}

pub fn open_outputs(
    out: &OutputArgs,
    default_svg: PathBuf,
    save: Option<&Path>,
    mode: Mode,
) -> Result<Outputs, PreflightError> {
    let svg_path = out.output.clone().unwrap_or(default_svg);
    let report = match &out.report {
        None => None,
        Some(path) => {
            let format = report_format(path)?;
            Some((preflight::open_output("the report", path)?, format))
        }
    };
    let wakers = out.wakers && mode.traces_switches();
    let with_wakers =
        |p: &Path, ext: &str| -> PathBuf { p.with_extension(format!("wakers.{ext}")) };
    Ok(Outputs {
        folded: out
            .folded
            .as_deref()
            .map(|p| preflight::open_output("the folded stacks", p))
            .transpose()?,
        wakers_svg: wakers
            .then(|| preflight::open_output("the wakeup graph", &with_wakers(&svg_path, "svg")))
            .transpose()?,
        wakers_folded: match (&out.folded, wakers) {
            (Some(p), true) => Some(preflight::open_output(
                "the wakeup chains",
                &with_wakers(p, "folded"),
            )?),
            _ => None,
        },
        saved: save
            .map(|p| preflight::open_output("the saved capture", p))
            .transpose()?,
        pprof: out
            .pprof
            .as_deref()
            .map(|p| preflight::open_output("the pprof profile", p))
            .transpose()?,
        timeline: out
            .timeline
            .as_deref()
            .map(|p| preflight::open_output("the timeline", p))
            .transpose()?,
        svg: preflight::open_output("the flame graph", &svg_path)?,
        report,
    })
}

pub fn default_svg_name(meta: &CaptureMeta, mode: Mode) -> PathBuf {
    preflight::default_output_name(
        &Target {
            pid: meta.pid,
            name: meta.target.clone(),
            given_tid: None,
        },
        mode.name(),
    )
}

/// Render the capture (profiler-core: analyse, fold, draw, report), then write every output
/// and print the summary.
pub fn render(saved: &SavedCapture, out: &OutputArgs, outputs: Outputs) -> Result<()> {
    if outputs.timeline.is_some() && saved.timeline.is_none() {
        anyhow::bail!(
            "this capture has no timeline for --timeline (saved before timelines were \
             recorded, or with --no-timeline)"
        );
    }
    let wakers = outputs.wakers_svg.is_some() || outputs.wakers_folded.is_some();
    if wakers && saved.profile.mode.traces_switches() && !saved.profile.wakers_recorded {
        anyhow::bail!("this capture has no wakers for --wakers (recorded with --no-wakers)");
    }
    let opts = RenderOptions {
        per_process: out.per_process,
        per_thread: out.per_thread,
        hide_idle: out.hide_idle,
        show_idle: out.show_idle,
        wakers,
        trace: outputs.timeline.is_some(),
        timeline_html: matches!(outputs.report, Some((_, ReportFormat::Html))),
        resources: out.resources,
    };
    let rendered = render::render(saved, &opts).context("cannot draw the flame graph")?;
    let svg_path = outputs.svg.path.clone();
    write_folded(&rendered.folded, outputs.folded)?;
    write_text(outputs.svg, "the flame graph", &rendered.svg)?;
    if let Some(wakers) = &rendered.wakers {
        write_folded(&wakers.folded, outputs.wakers_folded)?;
        if let Some(out) = outputs.wakers_svg {
            let path = write_text(out, "the wakeup graph", &wakers.svg)?;
            eprintln!("profiler: wrote wakeup graph to {}", path.display());
        }
    }
    if let Some((output, format)) = outputs.report {
        write_report(output, rendered.report(format))?;
    }
    if let Some(output) = outputs.saved {
        let path = write_output(output, "the saved capture", |w| saved.write_to(w))?;
        eprintln!("profiler: saved the capture to {}", path.display());
    }
    if let (Some(output), Some(trace)) = (outputs.timeline, &rendered.trace) {
        let path = write_output(output, "the timeline", |w| w.write_all(trace))?;
        eprintln!(
            "profiler: wrote the timeline (a Perfetto trace) to {}",
            path.display()
        );
    }
    if let Some(output) = outputs.pprof {
        let started = Instant::now();
        let path = write_output(output, "the pprof profile", |w| {
            pprof::write_pprof(saved, w)
        })?;
        log::info!(
            "pprof: {} bytes in {:.1} ms",
            std::fs::metadata(&path).map_or(0, |m| m.len()),
            started.elapsed().as_secs_f64() * 1e3
        );
        eprintln!("profiler: wrote the pprof profile to {}", path.display());
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(rendered.terminal()?.as_bytes())?;
    writeln!(
        stdout,
        "profiler: wrote flame graph to {}",
        svg_path.display()
    )?;
    Ok(())
}

/// Writes an output through a buffer and puts it in place.
fn write_output(
    mut out: Output,
    what: &str,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<PathBuf> {
    let path = out.path.clone();
    let written = {
        let mut writer = std::io::BufWriter::new(out.file());
        write(&mut writer).and_then(|()| writer.flush())
    };
    written
        .and_then(|()| out.commit())
        .with_context(|| format!("cannot write {what} to {}", path.display()))
}

fn write_folded(folded: &Folded, out: Option<Output>) -> Result<()> {
    let Some(out) = out else {
        return Ok(());
    };
    let path = write_output(out, "the folded stacks", |w| folded.write_to(&mut { w }))?;
    eprintln!("profiler: wrote folded stacks to {}", path.display());
    Ok(())
}

/// Writes the report the render stage made, and says where.
pub fn write_report(output: Output, text: std::io::Result<String>) -> Result<()> {
    let text = text.context("cannot write the report")?;
    let path = write_text(output, "the report", &text)?;
    eprintln!("profiler: wrote the report to {}", path.display());
    Ok(())
}

/// Writes text the render stage made.
pub fn write_text(out: Output, what: &str, text: &str) -> Result<PathBuf> {
    write_output(out, what, |w| w.write_all(text.as_bytes()))
}

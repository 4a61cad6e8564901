//! Render: folded stacks → an SVG flame graph (inferno). On-CPU frames take the `hot`
//! palette; frames whose time is mostly off the CPU take blues, and the `[off-cpu:*]` leaves
//! each have their own fixed colour, so waits stand apart from CPU at a glance.

use std::io::Write;

use inferno::flamegraph::{
    self, Options,
    color::{BasicPalette, Color, MultiPalette, Palette, PaletteMap},
};

use crate::fold::Folded;

/// Fixed colours of the synthetic state frames.
const STATE_COLOURS: [(&str, Color); 4] = [
    (
        "[off-cpu:sleep]",
        Color {
            r: 70,
            g: 130,
            b: 200,
        },
    ),
    (
        "[off-cpu:io]",
        Color {
            r: 140,
            g: 80,
            b: 200,
        },
    ),
    (
        "[off-cpu:runqueue]",
        Color {
            r: 220,
            g: 60,
            b: 60,
        },
    ),
    (
        "[off-cpu:other]",
        Color {
            r: 140,
            g: 140,
            b: 140,
        },
    ),
];

pub struct SvgOptions {
    pub title: String,
    pub subtitle: String,
    /// Colour by inferno's `wakeup` palette (the waker chain view) instead of on/off-CPU.
    pub wakeup_palette: bool,
}

pub fn write_svg(folded: &Folded, opts: &SvgOptions, out: impl Write) -> std::io::Result<()> {
    let mut palette = PaletteMap::default();
    for (name, colour) in STATE_COLOURS {
        palette.insert(name, colour);
    }
    for (name, &(on, off)) in &folded.frame_split {
        if off > on && !name.starts_with("[off-cpu:") {
            palette.insert(name, blue_for(name));
        }
    }
    let mut options = Options::default();
    options.title = opts.title.clone();
    options.subtitle = Some(opts.subtitle.clone());
    options.count_name = folded.unit.name().to_string();
    options.colors = if opts.wakeup_palette {
        Palette::Multi(MultiPalette::Wakeup)
    } else {
        Palette::Basic(BasicPalette::Hot)
    };
    // Same name, same colour, every run: graphs of two captures compare by eye.
    options.hash = true;
    options.deterministic = true;
    // Thin frames are where surprises hide; keep all but sub-pixel crumbs.
    options.min_width = 0.01;
    options.palette_map = Some(&mut palette);
    let mut lines: Vec<String> = folded
        .lines
        .iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    if lines.is_empty() {
        // inferno refuses an empty graph; the file must still be a valid SVG that says so.
        lines.push("[nothing was recorded] 1".to_string());
    }
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(std::io::Error::other)
}

/// Which capture a differential graph is drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffShape {
    /// Widths are the after capture: what grew and what is new show (red).
    After,
    /// Widths are the before capture: what shrank or disappeared shows (blue).
    Before,
}

/// A differential flame graph (inferno's colouring: red grew, blue shrank, by how much each
/// frame's count changed) from `stack → (before, after)` counts.
pub fn write_differential(
    stacks: &std::collections::BTreeMap<String, (u64, u64)>,
    shape: DiffShape,
    opts: &SvgOptions,
    count_name: &str,
    out: impl Write,
) -> std::io::Result<()> {
    let mut options = Options::default();
    options.title = opts.title.clone();
    options.subtitle = Some(opts.subtitle.clone());
    options.count_name = count_name.to_string();
    options.hash = true;
    options.deterministic = true;
    options.min_width = 0.01;
    // inferno draws the second count and colours by second − first: the before graph gets
    // the counts swapped, and the colours negated back so that red still means "grew".
    options.negate_differentials = shape == DiffShape::Before;
    let mut lines: Vec<String> = stacks
        .iter()
        .map(|(stack, &(before, after))| match shape {
            DiffShape::After => format!("{stack} {before} {after}"),
            DiffShape::Before => format!("{stack} {after} {before}"),
        })
        .collect();
    let drawn = stacks.values().any(|&(b, a)| match shape {
        DiffShape::After => a > 0,
        DiffShape::Before => b > 0,
    });
    if !drawn {
        // inferno refuses an empty graph; the file must still be a valid SVG that says so.
        lines = vec!["[nothing in this capture] 1 1".to_string()];
    }
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(std::io::Error::other)
}

/// A stable blue for a mostly-waiting frame, varied by name so neighbours differ.
fn blue_for(name: &str) -> Color {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let v = (hash % 1000) as f64 / 1000.0;
    Color {
        r: (60.0 + 60.0 * v) as u8,
        g: (120.0 + 70.0 * v) as u8,
        b: (200.0 + 55.0 * v) as u8,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::fold::Unit;

    #[test]
    fn svg_is_well_formed_and_names_the_frames() {
        let mut lines = BTreeMap::new();
        lines.insert("app;main;spin".to_string(), 300u64);
        lines.insert("app;main;nap;[off-cpu:sleep]".to_string(), 700);
        let mut frame_split = HashMap::new();
        frame_split.insert("main".to_string(), (300, 700));
        frame_split.insert("nap".to_string(), (0, 700));
        let folded = Folded {
            unit: Unit::Micros,
            lines,
            frame_split,
            hidden_ns: 0,
            hidden_threads: 0,
            go_scheduler_sleep_ns: 0,
        };
        let mut svg = Vec::new();
        write_svg(
            &folded,
            &SvgOptions {
                title: "app (PID 1)".into(),
                subtitle: "1 s".into(),
                wakeup_palette: false,
            },
            &mut svg,
        )
        .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.trim_end().ends_with("</svg>"));
        for needle in ["app (PID 1)", "spin", "nap", "[off-cpu:sleep]", "µs"] {
            assert!(svg.contains(needle), "{needle} missing");
        }
        // The sleep frame gets its fixed colour.
        assert!(svg.contains("rgb(70,130,200)"));
    }

    /// The fill of the frame named `name` in an inferno SVG.
    fn fill_of<'a>(svg: &'a str, name: &str) -> Option<&'a str> {
        let at = svg.find(&format!("<title>{name} ("))?;
        let rest = &svg[at..];
        let fill = rest.find("fill=\"")? + 6;
        Some(&rest[fill..fill + rest[fill..].find('"')?])
    }

    #[test]
    fn differential_graphs_are_red_where_time_grew_both_ways() {
        let mut stacks = BTreeMap::new();
        stacks.insert("app;main;grew".to_string(), (100u64, 300u64));
        stacks.insert("app;main;shrank".to_string(), (300, 100));
        stacks.insert("app;main;gone".to_string(), (200, 0));
        let opts = SvgOptions {
            title: "diff".into(),
            subtitle: "s".into(),
            wakeup_palette: false,
        };
        for shape in [DiffShape::After, DiffShape::Before] {
            let mut svg = Vec::new();
            write_differential(&stacks, shape, &opts, "µs/s", &mut svg).unwrap();
            let svg = String::from_utf8(svg).unwrap();
            assert!(svg.trim_end().ends_with("</svg>"));
            let grew = fill_of(&svg, "grew").unwrap();
            let shrank = fill_of(&svg, "shrank").unwrap();
            assert!(grew.starts_with("rgb(255,"), "{shape:?}: grew is {grew}");
            assert!(shrank.ends_with(",255)"), "{shape:?}: shrank is {shrank}");
            // Only the graph drawn on the before capture shows what disappeared.
            assert_eq!(
                fill_of(&svg, "gone").is_some(),
                shape == DiffShape::Before,
                "{shape:?}"
            );
        }
    }

    #[test]
    fn an_empty_capture_still_renders() {
        let folded = Folded {
            unit: Unit::Samples,
            lines: BTreeMap::new(),
            frame_split: HashMap::new(),
            hidden_ns: 0,
            hidden_threads: 0,
            go_scheduler_sleep_ns: 0,
        };
        let mut svg = Vec::new();
        let opts = SvgOptions {
            title: "t".into(),
            subtitle: "s".into(),
            wakeup_palette: false,
        };
        write_svg(&folded, &opts, &mut svg).unwrap();
        assert!(
            String::from_utf8(svg)
                .unwrap()
                .contains("nothing was recorded")
        );
    }
}

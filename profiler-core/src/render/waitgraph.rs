//! The HTML report's wait-for graph: processes as boxes, and each wait on another profiled
//! process as an arrow from the waiting process to the one that served it, as thick as the
//! waits' time, labelled with what the waits were on; each served process says what its
//! serving threads did (chain.rs). Drawn as inline SVG: the page loads nothing.

use std::{collections::BTreeMap, fmt::Write as _};

use super::escape::esc;
use crate::chain::Chain;

const COLUMN_W: f64 = 560.0;
const BOX_W: f64 = 250.0;
const BOX_H: f64 = 54.0;
const ROW_H: f64 = 110.0;
const MARGIN: f64 = 20.0;

/// A process in the graph: its column (hops from a waiting process) and row.
struct Node {
    column: usize,
    row: usize,
    title: String,
    /// What its serving threads did, for a served process.
    cause: Option<String>,
}

/// The graph of `chains` as an SVG element; None without chains.
pub fn wait_graph(chains: &[Chain]) -> Option<String> {
    if chains.is_empty() {
        return None;
    }
    let mut nodes: BTreeMap<u32, Node> = BTreeMap::new();
    let mut rows = [0usize; 8];
    let mut place = |nodes: &mut BTreeMap<u32, Node>, pid: u32, column: usize, title: String| {
        nodes.entry(pid).or_insert_with(|| {
            let row = rows[column.min(7)];
            rows[column.min(7)] += 1;
            Node {
                column,
                row,
                title,
                cause: None,
            }
        });
    };
    // Edges: (from, to, seconds, label).
    let mut edges: Vec<(u32, u32, f64, String)> = Vec::new();
    for c in chains {
        place(
            &mut nodes,
            c.pid,
            0,
            format!("{} (PID {})", c.process, c.pid),
        );
        let mut from = (c.pid, c.wait_s, c.resource.clone());
        for (depth, hop) in c.hops.iter().enumerate() {
            place(
                &mut nodes,
                hop.pid,
                depth + 1,
                format!("{} (PID {})", hop.process, hop.pid),
            );
            if let Some(n) = nodes.get_mut(&hop.pid) {
                n.cause
                    .get_or_insert_with(|| format!("{:.0} % {}", hop.cause_pct, hop.cause));
            }
            edges.push((from.0, hop.pid, from.1, from.2.clone()));
            let next = hop
                .sites
                .first()
                .and_then(|s| s.resource.clone())
                .unwrap_or_default();
            from = (hop.pid, hop.serving_s * hop.cause_pct / 100.0, next);
        }
    }
    Some(draw(&nodes, &merged(edges)))
}

/// Edges between the same two processes as one: their time summed, each resource a line.
fn merged(edges: Vec<(u32, u32, f64, String)>) -> Vec<(u32, u32, f64, Vec<String>)> {
    let mut by_pair: BTreeMap<(u32, u32), (f64, Vec<String>)> = BTreeMap::new();
    for (from, to, secs, label) in edges {
        let e = by_pair.entry((from, to)).or_default();
        e.0 += secs;
        if !label.is_empty() && !e.1.contains(&label) {
            e.1.push(label);
        }
    }
    by_pair
        .into_iter()
        .map(|((from, to), (secs, labels))| (from, to, secs, labels))
        .collect()
}

fn draw(nodes: &BTreeMap<u32, Node>, edges: &[(u32, u32, f64, Vec<String>)]) -> String {
    let columns = nodes.values().map(|n| n.column).max().unwrap_or(0) + 1;
    let rows = nodes.values().map(|n| n.row).max().unwrap_or(0) + 1;
    let width = MARGIN * 2.0 + (columns - 1) as f64 * COLUMN_W + BOX_W;
    let height = MARGIN * 2.0 + (rows - 1) as f64 * ROW_H + BOX_H;
    let at = |n: &Node| {
        (
            MARGIN + n.column as f64 * COLUMN_W,
            MARGIN + n.row as f64 * ROW_H,
        )
    };
    let most = edges.iter().map(|e| e.2).fold(0.0, f64::max).max(1e-9);
    let mut svg = format!(
        "<svg class=\"waitgraph\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" \
         height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"12\">\
         <defs><marker id=\"wg-arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerUnits=\"userSpaceOnUse\" markerWidth=\"14\" markerHeight=\"14\" \
         orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" \
         fill=\"#b05a1a\"/></marker></defs>"
    );
    for (from, to, secs, labels) in edges {
        let (Some(a), Some(b)) = (nodes.get(from), nodes.get(to)) else {
            continue;
        };
        let ((ax, ay), (bx, by)) = (at(a), at(b));
        let (x1, y1, x2, y2) = (ax + BOX_W, ay + BOX_H / 2.0, bx, by + BOX_H / 2.0);
        let stroke = 1.5 + 8.0 * secs / most;
        let _ = write!(
            svg,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" \
             stroke=\"#b05a1a\" stroke-width=\"{stroke:.1}\" marker-end=\"url(#wg-arrow)\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.2} s waiting on</text>",
            (x1 + x2) / 2.0,
            (y1 + y2) / 2.0 - 10.0,
            secs,
        );
        for (i, label) in labels.iter().enumerate() {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">\
                 <title>{}</title>{}</text>",
                (x1 + x2) / 2.0,
                (y1 + y2) / 2.0 + 20.0 + 14.0 * i as f64,
                esc(label),
                esc(&shorten(label, 46)),
            );
        }
    }
    for n in nodes.values() {
        let (x, y) = at(n);
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"6\" \
             fill=\"#fff7e0\" stroke=\"#c08040\"/><text x=\"{:.1}\" y=\"{:.1}\" \
             font-weight=\"bold\">{}</text>",
            x + 8.0,
            y + 20.0,
            esc(&shorten(&n.title, 36)),
        );
        if let Some(cause) = &n.cause {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\"><title>{}</title>{}</text>",
                x + 8.0,
                y + 40.0,
                esc(cause),
                esc(&shorten(cause, 38)),
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// `s` in at most `n` characters, an ellipsis where cut.
fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{Chain, Hop};

    fn chain() -> Chain {
        Chain {
            pid: 10,
            process: "app".into(),
            threads: vec!["caller-11".into()],
            thread_count: 1,
            site: "recv ← ask".into(),
            resource: "TCP → 127.0.0.1:5432 (db, PID 20)".into(),
            wait_s: 3.5,
            wait_pct: 90.0,
            hops: vec![Hop {
                pid: 20,
                process: "db".into(),
                threads: vec!["db-21".into()],
                thread_count: 1,
                serving_s: 3.0,
                on_cpu_pct: 20.0,
                runnable_pct: 5.0,
                sites: Vec::new(),
                cause: "fdatasync ← flush on /wal (ext4, vda)".into(),
                cause_pct: 75.0,
            }],
        }
    }

    #[test]
    fn a_chain_is_two_boxes_and_an_arrow_labelled_with_its_wait() {
        let svg = wait_graph(&[chain()]).expect("a graph");
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        assert_eq!(svg.matches("<line").count(), 1, "{svg}");
        assert!(
            svg.contains("app (PID 10)") && svg.contains("db (PID 20)"),
            "{svg}"
        );
        assert!(svg.contains("3.50 s waiting on"), "{svg}");
        // Two waits between the same processes: one arrow, both resources on it.
        let mut unix = chain();
        unix.resource = "Unix socket /run/db.sock (db, PID 20)".into();
        let svg = wait_graph(&[chain(), unix]).expect("a graph");
        assert_eq!(svg.matches("<line").count(), 1, "{svg}");
        assert!(
            svg.contains("7.00 s waiting on") && svg.contains("/run/db.sock"),
            "{svg}"
        );
        assert!(
            svg.contains("75 % fdatasync ← flush on /wal (ext4, vda)"),
            "{svg}"
        );
        assert!(wait_graph(&[]).is_none());
    }
}

//! End-to-end, privileged: `--report x.html` on the test workload, opened in headless Chromium
//! (Debian's `chromium`, which `cargo xtask test` installs) and driven over the DevTools
//! protocol on a pipe (`--remote-debugging-pipe`: JSON messages ending in NUL on fds 3 and 4).
//! The page must load without a console error or exception and without a network request,
//! unpack what it carries packed (the flame graph's document, the timeline's events) with the
//! browser's own `DecompressionStream`, the flame graph's own search must find a known
//! function, the timeline's heatmaps and the range flame graph drawn from the unpacked events
//! must show the workload's samples and waits, a screenshot must not be blank, and the page
//! must print to PDF.

mod common;

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    os::{fd::FromRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::{Receiver, RecvTimeoutError, channel},
    time::{Duration, Instant},
};

use base64::Engine as _;
use common::*;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
/// A DevTools command that takes longer than this has hung.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Headless Chromium with a DevTools session on one page.
struct Browser {
    child: Child,
    to: File,
    from: Receiver<Value>,
    next_id: u64,
    /// The page's session (flat mode: commands carry it).
    session: Option<String>,
    /// Every event received so far.
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn launch() -> Self {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: `cargo xtask test` installs Debian's chromium"
        );
        let profile = tempfile::tempdir().expect("a browser profile directory");
        let (to_read, to_write) = pipe();
        let (from_read, from_write) = pipe();
        let mut cmd = Command::new(CHROMIUM);
        cmd.args([
            "--headless=new",
            // Root has no sandbox: the page is our own file.
            "--no-sandbox",
            "--remote-debugging-pipe",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--window-size=1280,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: between fork and exec only dup2 and fcntl run (async-signal-safe). The pipe
        // ends move above 10 first so that placing one on 3 or 4 cannot close the other.
        unsafe {
            cmd.pre_exec(move || {
                let high_in = libc::fcntl(to_read, libc::F_DUPFD, 10);
                let high_out = libc::fcntl(from_write, libc::F_DUPFD, 10);
                if high_in < 0
                    || high_out < 0
                    || libc::dup2(high_in, 3) < 0
                    || libc::dup2(high_out, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        // SAFETY: each fd is ours, from pipe2, and owned once from here on.
        let (to, from) = unsafe {
            libc::close(to_read);
            libc::close(from_write);
            (File::from_raw_fd(to_write), File::from_raw_fd(from_read))
        };
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(from);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                message.pop();
                let Ok(v) = serde_json::from_slice::<Value>(&message) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            to,
            from: rx,
            next_id: 1,
            session: None,
            events: Vec::new(),
            _profile: profile,
        }
    }

    /// Sends a command (to the page's session once attached) and waits for its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("send {method} to chromium: {e}"));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let v = self.next_message(deadline, method);
            if v["id"] == json!(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method} failed: {e}");
                }
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    fn next_message(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.from.recv_timeout(left) {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {waiting_for}"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("chromium closed its pipe while we waited for {waiting_for}")
            }
        }
    }

    /// Waits for an event of the page's session.
    fn wait_for(&mut self, method: &str) {
        if self.events.iter().any(|e| e["method"] == method) {
            return;
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let v = self.next_message(deadline, method);
            let found = v["method"] == method;
            self.events.push(v);
            if found {
                return;
            }
        }
    }

    /// Takes every event that arrived meanwhile.
    fn drain(&mut self) {
        while let Ok(v) = self.from.try_recv() {
            self.events.push(v);
        }
    }

    /// Evaluates an expression in the page (a promise: what it resolves to); returns its
    /// value, failing on an exception or a rejection.
    fn evaluate(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}\nthrew: {e:#}");
        }
        r["result"]["value"].clone()
    }

    /// Console errors, uncaught exceptions and failed loads seen so far, one line each.
    fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e["method"].as_str()? {
                "Runtime.exceptionThrown" => {
                    Some(format!("exception: {}", e["params"]["exceptionDetails"]))
                }
                "Runtime.consoleAPICalled" if e["params"]["type"] == "error" => {
                    Some(format!("console.error: {}", e["params"]["args"]))
                }
                "Log.entryAdded" if e["params"]["entry"]["level"] == "error" => {
                    Some(format!("log: {}", e["params"]["entry"]["text"]))
                }
                "Network.loadingFailed" => Some(format!("load failed: {}", e["params"])),
                _ => None,
            })
            .collect()
    }

    /// URLs the page requested.
    fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array it is given.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    (fds[0], fds[1])
}

/// The share of a screenshot's pixels that differ from its most common colour.
fn non_background_share(png_bytes: &[u8]) -> (f64, usize) {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("the screenshot is a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a PNG of sane size")];
    let info = reader.next_frame(&mut buf).expect("decode the screenshot");
    let channels = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| &p[..3.min(channels)])
        .collect();
    let mut counts: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for p in &pixels {
        *counts.entry(p).or_default() += 1;
    }
    let background = counts.values().copied().max().unwrap_or(0);
    (
        1.0 - background as f64 / pixels.len().max(1) as f64,
        counts.len(),
    )
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn the_html_report_works_in_a_real_browser() {
    require_root();
    let _serial = serial();
    let html = capture_html_report();
    let mut browser = open_page(&html);
    let (matched, hits) = check_flame_graph(&mut browser);
    check_parts(&mut browser);
    let (boxes, range_boxes) = check_timeline(&mut browser);
    let (drawn, colours) = check_screenshot(&mut browser, &html);
    let pdf_bytes = check_pdf(&mut browser, &html);
    check_no_errors_nor_fetches(&mut browser);
    eprintln!(
        "html report: search `spin_work` {matched} ({hits} frames), range flame graph {boxes} \
         boxes (a 0.5 s range: {range_boxes}), screenshot {:.0} % drawn in {colours} colours, \
         PDF {} KiB; kept beside {}",
        drawn * 100.0,
        pdf_bytes.len() / 1024,
        html.display()
    );
}

/// The `mixed` workload captured with an HTML report, checked self-contained: its path.
fn capture_html_report() -> PathBuf {
    let dir = tempfile::tempdir().expect("temp dir");
    let workload = Workload::spawn(
        Build::NoFramePointers,
        &["mixed", dir.path().to_str().unwrap()],
    );
    let html: PathBuf = outputs("html-report").svg.with_extension("html");
    let (_, out) = capture(
        &workload,
        "html-report",
        3,
        &["--mode", "wall", "--report", html.to_str().unwrap()],
    );
    drop(workload);
    let page = std::fs::read_to_string(&html).expect("read the HTML report");
    // Self-contained: nothing the page could load from elsewhere.
    for needle in ["<link", "src=\"http", "src='http", "@import", "url(http"] {
        assert!(!page.contains(needle), "the page refers outside: {needle}");
    }
    assert!(std::fs::read_to_string(&out.svg).is_ok(), "the SVG too");
    html
}

/// The page open in a headless browser, loaded and its flame graph initialised.
fn open_page(html: &Path) -> Browser {
    let mut browser = Browser::launch();
    let target = browser.call("Target.createTarget", json!({"url": "about:blank"}));
    let target_id = target["targetId"]
        .as_str()
        .expect("a target id")
        .to_string();
    let attached = browser.call(
        "Target.attachToTarget",
        json!({"targetId": target_id, "flatten": true}),
    );
    browser.session = Some(
        attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string(),
    );
    for domain in ["Runtime", "Log", "Page", "Network"] {
        browser.call(&format!("{domain}.enable"), json!({}));
    }
    let url = format!("file://{}", html.display());
    let nav = browser.call("Page.navigate", json!({"url": url}));
    assert!(nav.get("errorText").is_none(), "navigation failed: {nav}");
    browser.wait_for("Page.loadEventFired");
    // The packed parts are unpacked and drawn after the load: the flame graph's frame filled
    // and loaded, the timeline decoded and its whole window's graph drawn.
    let parts =
        browser.evaluate("window.reportReady.then(function (parts) { return parts.length; })");
    assert_eq!(parts, json!(2), "the flame graph and the timeline");
    // inferno's init finishes in a timeout after the SVG's load event.
    std::thread::sleep(Duration::from_millis(500));
    browser.drain();
    browser
}

/// The flame graph's script, search and zoom: what the search matched and the frames it lit.
fn check_flame_graph(browser: &mut Browser) -> (String, u64) {
    // Its own script ran in its frame: init made the graph fluid (no width).
    let graph_ready = browser.evaluate(
        "(() => { const d = document.getElementById('flamegraph').contentDocument; \
         const svg = d && d.querySelector('svg'); \
         return !!svg && !svg.hasAttribute('width') && !!d.getElementById('frames'); })()",
    );
    assert_eq!(
        graph_ready,
        json!(true),
        "the flame graph's script did not run"
    );
    // Its search, as the Search button calls it, highlights spin_work.
    let found = browser.evaluate(
        "(() => { const w = document.getElementById('flamegraph').contentWindow; \
         w.search('spin_work'); \
         const hits = w.document.querySelectorAll('#frames rect[fill=\"rgb(230,0,230)\"]').length; \
         return [w.document.getElementById('matched').textContent, hits]; })()",
    );
    let matched = found[0].as_str().unwrap_or_default().to_string();
    let hits = found[1].as_u64().unwrap_or(0);
    let pct: f64 = matched
        .strip_prefix("Matched: ")
        .and_then(|p| p.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("the search shows no match: {found}"));
    assert!(
        pct > 0.0 && hits > 0,
        "search for spin_work: {matched}, {hits} frames"
    );
    // Zoom: clicking a frame narrows the graph to it.
    let zoomed = browser.evaluate(
        "(() => { const w = document.getElementById('flamegraph').contentWindow; \
         const g = w.document.querySelector('#frames > g'); \
         g.dispatchEvent(new w.MouseEvent('click', {bubbles: true})); \
         return w.document.querySelectorAll('#frames > g.hide, #frames > g.parent').length; })()",
    );
    assert!(
        zoomed.as_u64().unwrap_or(0) > 0,
        "zooming changed nothing: {zoomed}"
    );
    (matched, hits)
}

/// The page has its parts: verdict, thread bars, a latency chart per site with marks.
fn check_parts(browser: &mut Browser) {
    let parts = browser.evaluate(
        "[document.getElementById('verdict').textContent.length, \
          document.querySelectorAll('#threads svg rect').length, \
          document.querySelectorAll('.site svg.chart').length, \
          document.querySelectorAll('.site svg.chart .mark').length]",
    );
    let n = |i: usize| parts[i].as_u64().unwrap_or(0);
    assert!(n(0) > 20, "no verdict: {parts}");
    assert!(n(1) > 7, "no thread bars: {parts}");
    assert!(
        n(2) >= 1 && n(3) >= 3,
        "no latency chart with marks: {parts}"
    );
}

/// The timeline: strips, heatmaps with cells, and the range flame graph drawn from the page's
/// packed events (no JSON of them on the page), first of the whole window (the workload's
/// `spin_work` samples and `sleep_20ms` waits in it), then of a range chosen by two clicks on
/// the heatmap. The boxes of each graph.
fn check_timeline(browser: &mut Browser) -> (u64, u64) {
    let parts = browser.evaluate(
        "(() => { const data = document.getElementById('tl-data'); \
           const flame = document.getElementById('tl-flame'); \
           const names = Array.from(flame.children, d => d.textContent); \
           return { encoding: data && data.type + ' ' + data.dataset.encoding, \
             strips: document.querySelectorAll('svg.tl-strip rect').length, \
             cpu: Array.from(document.querySelectorAll('#tl-cpu rect')).filter(r => +r.dataset.v > 0).length, \
             blocked: Array.from(document.querySelectorAll('#tl-blocked rect')).filter(r => +r.dataset.v > 0).length, \
             from: flame.dataset.from, boxes: names.length, \
             spin: names.some(n => n.includes('spin_work')), \
             sleep: names.some(n => n.includes('sleep_20ms')), \
             off: names.some(n => n.startsWith('[off-cpu:')) }; })()",
    );
    assert_eq!(
        parts["encoding"],
        json!("application/octet-stream gzip+base64"),
        "{parts}"
    );
    let n = |k: &str| parts[k].as_u64().unwrap_or(0);
    assert!(n("strips") > 3, "no strips: {parts}");
    assert!(n("cpu") > 0 && n("blocked") > 0, "empty heatmaps: {parts}");
    assert!(
        parts["from"] == json!("0.00")
            && n("boxes") > 10
            && parts["spin"] == json!(true)
            && parts["sleep"] == json!(true)
            && parts["off"] == json!(true),
        "the whole window's range flame graph lacks the workload's samples or waits: {parts}"
    );
    // Two clicks on the CPU heatmap, at 1.00 s and 1.48 s: that range's graph.
    let range = browser.evaluate(
        "(() => { const cell = t => document.querySelector(`#tl-cpu rect[data-t=\"${t}\"]`); \
           for (const t of ['1.00', '1.48']) \
             cell(t).dispatchEvent(new MouseEvent('click', {bubbles: true})); \
           const flame = document.getElementById('tl-flame'); \
           return { from: flame.dataset.from, to: flame.dataset.to, boxes: flame.children.length, \
             text: document.getElementById('tl-range').textContent }; })()",
    );
    assert!(
        range["from"] == json!("1.00") && range["to"] == json!("1.50"),
        "the clicks chose no range: {range}"
    );
    let range_boxes = range["boxes"].as_u64().unwrap_or(0);
    assert!(range_boxes > 3, "the range's graph is empty: {range}");
    (n("boxes"), range_boxes)
}

/// A screenshot that is not blank (kept beside the page): the share drawn and its colours.
fn check_screenshot(browser: &mut Browser, html: &Path) -> (f64, usize) {
    let shot = browser.call("Page.captureScreenshot", json!({"format": "png"}));
    let png_bytes = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().expect("screenshot data"))
        .expect("base64 screenshot");
    let shot_path = html.with_extension("png");
    std::fs::write(&shot_path, &png_bytes).expect("keep the screenshot");
    let (drawn, colours) = non_background_share(&png_bytes);
    assert!(
        drawn > 0.05 && colours > 16,
        "the screenshot ({}) looks blank: {:.1} % drawn, {colours} colours",
        shot_path.display(),
        drawn * 100.0
    );
    (drawn, colours)
}

/// The page printed to PDF (kept beside it), with its stacks opened: the PDF.
fn check_pdf(browser: &mut Browser, html: &Path) -> Vec<u8> {
    let pdf = browser.call(
        "Page.printToPDF",
        json!({"printBackground": true, "preferCSSPageSize": true}),
    );
    let pdf_bytes = base64::engine::general_purpose::STANDARD
        .decode(pdf["data"].as_str().expect("PDF data"))
        .expect("base64 PDF");
    assert!(pdf_bytes.starts_with(b"%PDF") && pdf_bytes.len() > 10_000);
    // Printing opened the stacks (closed `<details>` would print as nothing).
    let details = browser.evaluate(
        "[document.querySelectorAll('details[open]').length, \
          document.querySelectorAll('details').length]",
    );
    assert!(
        details[1].as_u64() > Some(0) && details[0] == details[1],
        "stacks closed on paper: {details}"
    );
    std::fs::write(html.with_extension("pdf"), &pdf_bytes).expect("keep the PDF");
    pdf_bytes
}

/// No error logged, nothing fetched from elsewhere.
fn check_no_errors_nor_fetches(browser: &mut Browser) {
    browser.drain();
    let errors = browser.errors();
    assert!(
        errors.is_empty(),
        "the page logged errors:\n{}",
        errors.join("\n")
    );
    let foreign: Vec<String> = browser
        .requests()
        .into_iter()
        .filter(|u| !u.starts_with("file://") && !u.starts_with("about:"))
        .collect();
    assert!(foreign.is_empty(), "the page fetched: {foreign:?}");
    assert!(
        browser.requests().iter().any(|u| u.starts_with("file://")),
        "the network domain saw nothing at all: {:?}",
        browser.requests()
    );
}

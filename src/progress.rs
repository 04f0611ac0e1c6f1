//! The progress display owns the terminal during a run: an indicatif bar for the run (done / cached / failed of
//! total) with a line per running instance (elapsed time and its last log line), or plain
//! line-per-event output when stdout is not a terminal or with `--progress plain`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use heddle_runner::event::Event;
use heddle_runner::record::Status;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::printable::{printable, printable_line};
use crate::style::{self, Stream, Tone};

/// A status word for stderr, where the display writes.
fn paint(tone: Tone, word: &str) -> String {
    style::paint(Stream::Stderr, tone, word)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, plain lines otherwise.
    Auto,
    Bar,
    Plain,
    /// Nothing but the summary.
    Quiet,
}

#[derive(Default, Debug, Clone, Copy)]
pub struct Tally {
    pub ran: usize,
    pub cached: usize,
    pub failed: usize,
    pub skipped: usize,
}

/// Render the scheduler's events until it closes the channel; returns what it counted.
pub async fn display(mode: ProgressMode, total: usize, rx: UnboundedReceiver<Event>) -> Tally {
    let use_bar = match mode {
        ProgressMode::Bar => true,
        ProgressMode::Auto => std::io::IsTerminal::is_terminal(&std::io::stderr()),
        _ => false,
    };
    if use_bar {
        bar(total, rx).await
    } else {
        lines(mode == ProgressMode::Quiet, rx).await
    }
}

/// A line per event (nothing but the count when quiet). Written through a buffer flushed
/// whenever no event is waiting: a no-op run of a 100,000-value matrix is 100,000 lines, and a
/// `write` call per line was a visible share of it. A line still shows as soon as it happens.
async fn lines(quiet: bool, mut rx: UnboundedReceiver<Event>) -> Tally {
    let mut tally = Tally::default();
    let mut err = std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr());
    let mut running: BTreeMap<usize, String> = BTreeMap::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(ev) = next {
            count(&mut tally, &ev);
            track(&mut running, &ev);
            if !quiet {
                print_line(&mut err, &ev);
                if let Some(w) = warning_line(&running, &ev) {
                    let _ = writeln!(err, "{w}");
                }
            }
            next = rx.try_recv().ok();
        }
        let _ = err.flush();
    }
    tally
}

/// The labels of the instances running now, so a line of theirs can be attributed.
fn track(running: &mut BTreeMap<usize, String>, ev: &Event) {
    match ev {
        Event::Started { id, label, .. } => {
            running.insert(*id, label.clone());
        }
        Event::Finished { id, .. } => {
            running.remove(id);
        }
        _ => {}
    }
}

/// A stage's own `warning: ...` line, shown as it is printed (the rest of its output goes only
/// to its log): `dfc/identify` warns this way before a long sweep starts, so the warning must
/// not wait for the run's end.
fn warning_line(running: &BTreeMap<usize, String>, ev: &Event) -> Option<String> {
    let Event::Line { id, line } = ev else {
        return None;
    };
    let text = line.trim_start().strip_prefix("warning: ")?;
    let label = running.get(id).map(String::as_str).unwrap_or("?");
    Some(format!(
        "{}  {}  {}",
        paint(Tone::Failed, "warning"),
        printable(label),
        printable(text)
    ))
}

/// The line `lines` prints for `ev`; what a stage controls in it (its label's matrix values,
/// its error line) is made [`printable`], and heddle's own colours are not.
fn print_line(err: &mut impl Write, ev: &Event) {
    match ev {
        Event::Started { label, why, .. } => {
            // The reason quotes params and matrix values: the user's text too.
            let _ = writeln!(
                err,
                "run     {}  ({})",
                printable_line(label),
                printable_line(&why.to_string())
            );
        }
        Event::Finished {
            label,
            status,
            cached,
            duration_ms,
            error,
            ..
        } => {
            let label = printable_line(label);
            let error = printable(error.as_deref().unwrap_or(""));
            let _ = match (status, cached) {
                (Status::Ok, true) => {
                    writeln!(err, "{}  {label}", paint(Tone::Cached, "cached"))
                }
                (Status::Ok, false) => {
                    let ok = paint(Tone::Ok, "ok");
                    writeln!(err, "{ok}      {label}  {}", secs(*duration_ms))
                }
                (Status::Failed, _) => {
                    let failed = paint(Tone::Failed, "FAILED");
                    writeln!(err, "{failed}  {label}  {error}")
                }
                (Status::Skipped, _) => {
                    writeln!(err, "skip    {label}  {error}")
                }
            };
        }
        Event::Note(n) => {
            let _ = writeln!(err, "note    {}", printable(&n.to_string()));
        }
        Event::Line { .. } => {}
    }
}

/// An indicatif bar for the run and a spinner per running instance with its last log line.
async fn bar(total: usize, mut rx: UnboundedReceiver<Event>) -> Tally {
    let mut tally = Tally::default();
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
    let main = multi.add(ProgressBar::new(total as u64));
    main.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise:.dim} [{bar:30.cyan/blue}] {pos}/{len} {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    main.enable_steady_tick(Duration::from_millis(200));
    let line_style =
        ProgressStyle::with_template("  {spinner} {prefix:.bold} {elapsed:>4} {wide_msg:.dim}")
            .expect("template");
    let mut bars: BTreeMap<usize, ProgressBar> = BTreeMap::new();
    let mut running: BTreeMap<usize, String> = BTreeMap::new();
    while let Some(ev) = rx.recv().await {
        track(&mut running, &ev);
        if let Some(w) = warning_line(&running, &ev) {
            let _ = multi.println(w);
        }
        match &ev {
            Event::Started { id, label, .. } => {
                let b = multi.add(ProgressBar::new_spinner());
                b.set_style(line_style.clone());
                b.set_prefix(printable_line(label).into_owned());
                b.enable_steady_tick(Duration::from_millis(200));
                bars.insert(*id, b);
            }
            Event::Line { id, line } => {
                if let Some(b) = bars.get(id) {
                    b.set_message(
                        printable(&line.chars().take(160).collect::<String>()).into_owned(),
                    );
                }
            }
            Event::Finished {
                id,
                label,
                status,
                error,
                ..
            } => {
                if let Some(b) = bars.remove(id) {
                    b.finish_and_clear();
                    multi.remove(&b);
                }
                if *status == Status::Failed {
                    let _ = multi.println(format!(
                        "{}  {}  {}",
                        paint(Tone::Failed, "FAILED"),
                        printable_line(label),
                        printable(error.as_deref().unwrap_or(""))
                    ));
                }
                main.inc(1);
            }
            Event::Note(n) => {
                let _ = multi.println(format!("note    {}", printable(&n.to_string())));
            }
        }
        count(&mut tally, &ev);
        main.set_message(format!(
            "ran {} · cached {} · failed {} · skipped {}",
            tally.ran, tally.cached, tally.failed, tally.skipped
        ));
    }
    main.finish_and_clear();
    tally
}

fn count(t: &mut Tally, ev: &Event) {
    if let Event::Finished { status, cached, .. } = ev {
        match (status, cached) {
            (Status::Ok, true) => t.cached += 1,
            (Status::Ok, false) => t.ran += 1,
            (Status::Failed, _) => t.failed += 1,
            (Status::Skipped, _) => t.skipped += 1,
        }
    }
}

pub fn secs(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

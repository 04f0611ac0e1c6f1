//! Logbook entries: Markdown with heddle-owned front matter and marked blocks.
//!
//! ```text
//! ---
//! heddle-entry: 1
//! pipeline: mezo-ort
//! ...
//! ---
//! <!-- heddle:begin table src=compare#table sha256=… -->
//! | eps | sign | … |
//! <!-- heddle:end table -->
//! ```
//! The author writes prose anywhere outside the blocks; heddle rewrites only the front matter and
//! the text between `heddle:begin` and `heddle:end`.

use std::collections::BTreeMap;

use heddle_schema::{RunRecord, Status};

use crate::compare::Tolerance;

/// A marked block: its kind (`table`, `failures`, `provenance`), attributes and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub kind: String,
    /// In the order written, so a rewrite does not reorder them.
    pub attrs: Vec<(String, String)>,
    pub body: String,
}

impl Block {
    pub fn src(&self) -> Option<&str> {
        self.attr("src")
    }

    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The tolerance the entry states for this block (`rtol=0.02 atol=1e-6` on its begin
    /// marker), if any; a block without one is judged to the digits it printed.
    pub fn stated_tolerance(&self) -> Result<Option<Tolerance>, EntryError> {
        let num = |key: &str| -> Result<Option<f64>, EntryError> {
            self.attr(key)
                .map(|v| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| EntryError::BadTolerance {
                            block: self.src().unwrap_or(&self.kind).to_string(),
                            key: key.into(),
                            value: v.into(),
                        })
                })
                .transpose()
        };
        let (rtol, atol) = (num("rtol")?, num("atol")?);
        Ok((rtol.is_some() || atol.is_some()).then(|| Tolerance {
            rtol: rtol.unwrap_or(0.0),
            atol: atol.unwrap_or(0.0),
        }))
    }

    /// Attributes the author wrote besides the ones heddle derives from a run (`src`, `sha256`):
    /// kept when a refresh rewrites the block.
    pub fn authored_attrs(&self) -> Vec<(String, String)> {
        self.attrs
            .iter()
            .filter(|(k, _)| k != "src" && k != "sha256")
            .cloned()
            .collect()
    }
}

/// A parsed entry: front matter fields, and the text as segments (prose or blocks).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub front: BTreeMap<String, String>,
    pub segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    Prose(String),
    Block(Block),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EntryError {
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("the entry has no heddle front matter (a `---` block with `heddle-entry: 1`)")]
    NoFrontMatter,
    #[error("block `{block}`: {key}={value} is not a tolerance (a non-negative number, e.g. {key}=0.01)")]
    BadTolerance {
        block: String,
        key: String,
        value: String,
    },
}

const BEGIN: &str = "<!-- heddle:begin ";
const END: &str = "<!-- heddle:end";

impl Entry {
    pub fn parse(text: &str) -> Result<Entry, EntryError> {
        let mut lines = text.split_inclusive('\n').enumerate().peekable();
        let mut front = BTreeMap::new();
        match lines.peek() {
            Some((_, l)) if l.trim_end() == "---" => {
                lines.next();
                let mut closed = false;
                for (_, l) in lines.by_ref() {
                    if l.trim_end() == "---" {
                        closed = true;
                        break;
                    }
                    if let Some((k, v)) = l.split_once(':') {
                        front.insert(k.trim().to_string(), v.trim().to_string());
                    }
                }
                if !closed {
                    return Err(EntryError::Syntax {
                        line: 1,
                        message: "front matter is not closed with `---`".into(),
                    });
                }
            }
            _ => return Err(EntryError::NoFrontMatter),
        }
        if !front.contains_key("heddle-entry") {
            return Err(EntryError::NoFrontMatter);
        }
        let mut segments = Vec::new();
        let mut prose = String::new();
        while let Some((n, l)) = lines.next() {
            let t = l.trim();
            if let Some(rest) = t.strip_prefix(BEGIN) {
                let inner = rest.strip_suffix("-->").ok_or_else(|| EntryError::Syntax {
                    line: n + 1,
                    message: "unclosed marker comment".into(),
                })?;
                let mut words = inner.split_whitespace();
                let kind = words
                    .next()
                    .ok_or_else(|| EntryError::Syntax {
                        line: n + 1,
                        message: "marker without a kind".into(),
                    })?
                    .to_string();
                let attrs = words
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                    .collect();
                let mut body = String::new();
                let mut closed = false;
                for (_, l) in lines.by_ref() {
                    if l.trim().starts_with(END) {
                        closed = true;
                        break;
                    }
                    body.push_str(l);
                }
                if !closed {
                    return Err(EntryError::Syntax {
                        line: n + 1,
                        message: format!("block `{kind}` has no `<!-- heddle:end {kind} -->`"),
                    });
                }
                if !prose.is_empty() {
                    segments.push(Segment::Prose(std::mem::take(&mut prose)));
                }
                segments.push(Segment::Block(Block { kind, attrs, body }));
            } else {
                prose.push_str(l);
            }
        }
        if !prose.is_empty() {
            segments.push(Segment::Prose(prose));
        }
        Ok(Entry { front, segments })
    }

    pub fn render(&self) -> String {
        let mut out = String::from("---\n");
        for (k, v) in &self.front {
            out.push_str(&format!("{k}: {v}\n"));
        }
        out.push_str("---\n");
        for s in &self.segments {
            match s {
                Segment::Prose(p) => out.push_str(p),
                Segment::Block(b) => {
                    let attrs: Vec<String> =
                        b.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let attrs = if attrs.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", attrs.join(" "))
                    };
                    out.push_str(&format!("{BEGIN}{}{attrs} -->\n", b.kind));
                    out.push_str(&b.body);
                    if !b.body.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str(&format!("{END} {} -->\n", b.kind));
                }
            }
        }
        out
    }

    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Block(b) => Some(b),
            Segment::Prose(_) => None,
        })
    }

    pub fn blocks_mut(&mut self) -> impl Iterator<Item = &mut Block> {
        self.segments.iter_mut().filter_map(|s| match s {
            Segment::Block(b) => Some(b),
            Segment::Prose(_) => None,
        })
    }
}

/// One report table of a run: `label#output`, its digest and its Markdown.
#[derive(Debug, Clone)]
pub struct Table {
    pub src: String,
    pub digest: String,
    pub markdown: String,
}

/// The failures block of a run: every failed instance with its error line, and every skipped
/// one with the failure that skipped it.
pub fn failures_block(rec: &RunRecord) -> String {
    let mut out = String::new();
    for (label, r) in &rec.instances {
        match r.status.status {
            Status::Failed => out.push_str(&format!(
                "- `{label}` FAILED {}\n",
                r.status.error.as_deref().unwrap_or("(no error line)")
            )),
            Status::Skipped => {
                let cause = r.status.cause.as_ref();
                out.push_str(&format!(
                    "- `{label}` SKIPPED because `{}` failed: {}\n",
                    cause.map(|c| c.label.as_str()).unwrap_or("?"),
                    cause.and_then(|c| c.error.as_deref()).unwrap_or("")
                ));
            }
            Status::Ok => {}
        }
    }
    if out.is_empty() {
        out.push_str("none\n");
    }
    out
}

/// Parse a failures block back into label → (FAILED|SKIPPED, error class).
pub fn parse_failures(body: &str) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.trim().strip_prefix("- `") else {
            continue;
        };
        let Some((label, rest)) = rest.split_once("` ") else {
            continue;
        };
        let (state, rest) = rest.split_once(' ').unwrap_or((rest, ""));
        let class = if state == "SKIPPED" {
            // "because `x` failed: Class: message"
            rest.split_once("failed: ")
                .map(|(_, e)| error_class(e))
                .unwrap_or_default()
        } else {
            error_class(rest)
        };
        out.insert(label.to_string(), (state.to_string(), class));
    }
    out
}

fn error_class(line: &str) -> String {
    line.split(':').next().unwrap_or("").trim().to_string()
}

pub fn provenance_block(rec: &RunRecord, lock_hash: Option<&str>) -> String {
    let (ran, cached, failed, skipped) = rec.counts();
    let mut out = format!(
        "Run `{}` of pipeline `{}` ({}), heddle {} on `{}`: {} instances — {ran} ran, {cached} from the cache, {failed} failed, {skipped} skipped.\n",
        rec.run_id,
        rec.pipeline,
        rec.pipeline_file,
        rec.heddle_version,
        rec.host,
        rec.instances.len()
    );
    if let Some(h) = lock_hash {
        out.push_str(&format!("Lock file sha256 `{h}`.\n"));
    }
    out.push_str("Reproduce: `heddle logbook verify THIS_FILE` (add `--fresh --runs 2` to re-execute every instance twice in a private cache).\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "---\nheddle-entry: 1\npipeline: p\n---\n# Title\n\nMy prose.\n<!-- heddle:begin table src=compare#table sha256=ab -->\n| a | b |\n| - | - |\n| 1 | 2 |\n<!-- heddle:end table -->\nMore prose.\n";

    #[test]
    fn parse_and_render_round_trip() {
        let e = Entry::parse(TEXT).unwrap();
        assert_eq!(e.front["pipeline"], "p");
        let b: Vec<_> = e.blocks().collect();
        assert_eq!(b[0].src(), Some("compare#table"));
        assert_eq!(b[0].body, "| a | b |\n| - | - |\n| 1 | 2 |\n");
        assert_eq!(e.render(), TEXT);
    }

    #[test]
    fn a_block_may_state_its_tolerance() {
        let t = "---\nheddle-entry: 1\n---\n<!-- heddle:begin table src=a#b rtol=0.02 -->\n| 1 |\n<!-- heddle:end table -->\n<!-- heddle:begin table src=c#d atol=x -->\n| 1 |\n<!-- heddle:end table -->\n";
        let e = Entry::parse(t).unwrap();
        let b: Vec<_> = e.blocks().collect();
        assert_eq!(
            b[0].stated_tolerance(),
            Ok(Some(Tolerance {
                rtol: 0.02,
                atol: 0.0
            }))
        );
        assert_eq!(
            b[0].authored_attrs(),
            vec![("rtol".to_string(), "0.02".to_string())]
        );
        assert_eq!(
            b[1].stated_tolerance().unwrap_err().to_string(),
            "block `c#d`: atol=x is not a tolerance (a non-negative number, e.g. atol=0.01)"
        );
        let plain = Entry::parse(TEXT).unwrap();
        assert_eq!(plain.blocks().next().unwrap().stated_tolerance(), Ok(None));
    }

    #[test]
    fn unclosed_block_is_an_error() {
        let t = "---\nheddle-entry: 1\n---\n<!-- heddle:begin table src=x -->\n| 1 |\n";
        assert!(matches!(
            Entry::parse(t),
            Err(EntryError::Syntax { line: 4, .. })
        ));
    }

    #[test]
    fn failures_parse_back() {
        let body = "- `optimize[precision=a16_w4]` FAILED AttributeError: 'function' object has no attribute 'x'\n- `probe[precision=a16_w4]` SKIPPED because `optimize[precision=a16_w4]` failed: AttributeError: boom\n";
        let row = |label: &str, state: &str| {
            let class = "AttributeError".to_string();
            (label.to_string(), (state.to_string(), class))
        };
        let expected = BTreeMap::from([
            row("optimize[precision=a16_w4]", "FAILED"),
            row("probe[precision=a16_w4]", "SKIPPED"),
        ]);
        assert_eq!(parse_failures(body), expected);
    }
}

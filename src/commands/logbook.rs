//! `heddle logbook new | verify | refresh`: a Markdown entry written from a run, checked by
//! rerunning what it names, or its marked blocks rewritten from a new run. Entries are parsed
//! and rendered by `heddle-report`; reruns go through [`crate::session::rerun`], the same path
//! as `heddle run`. `verify` lives in its own file ([`super::verify`]).

use crate::printable::say;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use heddle_cache::{Digest, Store};
use heddle_report::compare::Tolerance;
use heddle_report::entry::{self, Entry, Segment};
use heddle_runner::lock;
use heddle_runner::record::{self, RunRecord};

use super::entry_rerun::{overrides, pipeline_file, read_entry, rerun_options, Rerun};
use super::verify::{self, VerifyOptions};
use crate::artefacts::{tables, write_file};
use crate::error::{Error, EXIT_OK};
use crate::progress::ProgressMode;
use crate::session::{self, Session};

#[derive(Subcommand, Debug)]
pub enum LogbookCmd {
    /// Write a Markdown entry from a run (default: the last).
    New {
        #[arg(default_value = "last")]
        run: String,
        #[arg(short, long)]
        output: PathBuf,
        #[arg(long)]
        title: Option<String>,
    },
    /// Rerun what an entry names and compare every number and failure with it.
    Verify {
        entry: PathBuf,
        /// Re-execute every instance in a private cache.
        #[arg(long)]
        fresh: bool,
        /// How many times to rerun.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Judge every number within this relative tolerance instead of to the digits the entry
        /// printed (the default) or the tolerance a block states.
        #[arg(long)]
        rtol: Option<f64>,
        /// Absolute tolerance, with or instead of --rtol.
        #[arg(long)]
        atol: Option<f64>,
        #[arg(long, value_enum, default_value_t = ProgressMode::Quiet)]
        progress: ProgressMode,
    },
    /// Rewrite an entry's marked blocks from a new run (text outside the markers is kept).
    Refresh {
        entry: PathBuf,
        #[arg(long, value_enum, default_value_t = ProgressMode::Quiet)]
        progress: ProgressMode,
    },
}

pub async fn logbook(s: &Session, cmd: &LogbookCmd) -> Result<i32, Error> {
    let root = s.project_root();
    let store = s.open_store()?;
    match cmd {
        LogbookCmd::New { run, output, title } => {
            let rec = record::load(&root, run)?;
            new_entry(&store, &root, &rec, output, title.as_deref())
        }
        LogbookCmd::Verify {
            entry,
            fresh,
            runs,
            rtol,
            atol,
            progress,
        } => {
            let rr = Rerun {
                root: &root,
                store,
                progress: *progress,
            };
            let opts = VerifyOptions {
                fresh: *fresh,
                runs: *runs,
                tol: (rtol.is_some() || atol.is_some()).then(|| Tolerance {
                    rtol: rtol.unwrap_or(0.0),
                    atol: atol.unwrap_or(0.0),
                }),
            };
            verify::verify(entry, &rr, &opts).await
        }
        LogbookCmd::Refresh { entry, progress } => {
            let rr = Rerun {
                root: &root,
                store,
                progress: *progress,
            };
            refresh(entry, &rr).await
        }
    }
}

/// The sha256 of the lock file next to the run's pipeline, if there is one.
fn lock_hash(root: &Path, rec: &RunRecord) -> Option<String> {
    let file = root.join(&rec.pipeline_file);
    std::fs::read(lock::lock_path(&file))
        .ok()
        .map(|b| Digest::of_bytes(&b).to_string())
}

fn date(ms: u64) -> String {
    let (y, m, d, ..) = record::civil((ms / 1000) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The front matter heddle owns: what ran, where, when, with which params and images.
fn front_matter(root: &Path, rec: &RunRecord) -> BTreeMap<String, String> {
    let mut images = BTreeMap::new();
    for (_, r) in &rec.instances {
        if let Some(img) = &r.image {
            if let (Some(reference), Some(id)) = (
                img.get("reference").and_then(|v| v.as_str()),
                img.get("id").and_then(|v| v.as_str()),
            ) {
                images.insert(reference.to_string(), id.to_string());
            }
        }
    }
    let mut f = BTreeMap::new();
    f.insert("heddle-entry".into(), "1".into());
    f.insert("pipeline".into(), rec.pipeline.clone());
    f.insert("pipeline_file".into(), rec.pipeline_file.clone());
    f.insert("run".into(), rec.run_id.clone());
    f.insert("date".into(), date(rec.started_unix_ms));
    f.insert("heddle".into(), rec.heddle_version.clone());
    f.insert("host".into(), rec.host.clone());
    f.insert(
        "lock".into(),
        lock_hash(root, rec)
            .map(|h| format!("sha256:{h}"))
            .unwrap_or_else(|| "none".into()),
    );
    f.insert(
        "params".into(),
        serde_json::to_string(&rec.params).expect("json"),
    );
    f.insert(
        "images".into(),
        serde_json::to_string(&images).expect("json"),
    );
    if let Some(t) = toolchain(rec) {
        f.insert("toolchain".into(), t);
    }
    f
}

/// The toolchain the run's `dfc/identify`-style stages reported (facts with a `dfc` object):
/// the DFC's version, whether it was a test double, the GPU and HailoRT they saw. `None` when
/// no stage reported one.
fn toolchain(rec: &RunRecord) -> Option<String> {
    let found: BTreeMap<&str, serde_json::Value> = rec
        .instances
        .iter()
        .filter_map(|(label, r)| {
            let f = r.facts.as_ref()?;
            let dfc = f.get("dfc")?;
            Some((
                label.as_str(),
                serde_json::json!({
                    "dfc": dfc.get("version"),
                    "test_double": dfc.get("test_double"),
                    "gpu": f.get("gpu").and_then(|g| g.get("visible")),
                    "hailort": f.get("hailort"),
                }),
            ))
        })
        .collect();
    (!found.is_empty()).then(|| serde_json::to_string(&found).expect("json"))
}

fn block(kind: &str, attrs: Vec<(String, String)>, body: String) -> Segment {
    Segment::Block(entry::Block {
        kind: kind.into(),
        attrs,
        body,
    })
}

fn new_entry(
    store: &Store,
    root: &Path,
    rec: &RunRecord,
    out: &Path,
    title: Option<&str>,
) -> Result<i32, Error> {
    let tables = tables(store, root, rec);
    let title = title
        .map(str::to_string)
        .unwrap_or_else(|| format!("{} — {}", rec.pipeline, date(rec.started_unix_ms)));
    let mut segments = vec![Segment::Prose(format!(
        "# {title}\n\n<!-- Write the entry around the marked blocks: heddle rewrites only the front matter and the text between heddle:begin and heddle:end. -->\n\n"
    ))];
    for t in &tables {
        segments.push(Segment::Prose(format!("## Table: {}\n\n", t.src)));
        segments.push(block(
            "table",
            vec![
                ("src".into(), t.src.clone()),
                ("sha256".into(), t.digest.clone()),
            ],
            t.markdown.clone(),
        ));
        segments.push(Segment::Prose("\n".into()));
    }
    segments.push(Segment::Prose("## Failed instances\n\n".into()));
    segments.push(block("failures", vec![], entry::failures_block(rec)));
    segments.push(Segment::Prose("\n## Provenance\n\n".into()));
    segments.push(block(
        "provenance",
        vec![],
        entry::provenance_block(rec, lock_hash(root, rec).as_deref()),
    ));
    let e = Entry {
        front: front_matter(root, rec),
        segments,
    };
    write_file(out, e.render())?;
    say!(
        "wrote {} from run {} ({} tables)",
        out.display(),
        rec.run_id,
        tables.len()
    );
    Ok(EXIT_OK)
}

async fn refresh(entry_path: &Path, rr: &Rerun<'_>) -> Result<i32, Error> {
    let mut e = read_entry(entry_path)?;
    let (_, file) = pipeline_file(&e, rr.root)?;
    let sets = overrides(&e)?;
    let ropts = rerun_options(false);
    let mut rec = session::rerun(&file, &sets, rr.store.clone(), None, ropts, rr.progress).await?;
    let _ = record::save(rr.root, &mut rec);
    let tables = tables(&rr.store, rr.root, &rec);
    let lh = lock_hash(rr.root, &rec);
    let mut missing = Vec::new();
    for b in e.blocks_mut() {
        match b.kind.as_str() {
            "table" => {
                let src = b.src().unwrap_or("").to_string();
                match tables.iter().find(|t| t.src == src) {
                    Some(t) => {
                        b.body = t.markdown.clone();
                        let mut attrs =
                            vec![("src".into(), src), ("sha256".into(), t.digest.clone())];
                        attrs.extend(b.authored_attrs());
                        b.attrs = attrs;
                    }
                    None => missing.push(src),
                }
            }
            "failures" => b.body = entry::failures_block(&rec),
            "provenance" => b.body = entry::provenance_block(&rec, lh.as_deref()),
            _ => {}
        }
    }
    e.front = front_matter(rr.root, &rec);
    std::fs::write(entry_path, e.render()).map_err(|source| Error::Io {
        op: "cannot write",
        path: entry_path.to_path_buf(),
        source,
    })?;
    say!("refreshed {} from run {}", entry_path.display(), rec.run_id);
    for m in &missing {
        say!("warning: table {m} was not produced by this run; its block is unchanged");
    }
    Ok(EXIT_OK)
}

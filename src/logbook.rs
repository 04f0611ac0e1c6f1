//! `heddle logbook new|verify|refresh` and `heddle report`: glue between run records, the
//! store's artefacts and `heddle-report`. Re-running goes through the same path as `heddle run`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heddle_cache::{Digest, Store};
use heddle_report::compare::{compare_blocks, Rule, Tolerance};
use heddle_report::entry::{self, Entry, Segment, Table};
use heddle_report::html::{self, PlotFile, PlotSpec};
use heddle_runner::lock;
use heddle_runner::record::{self, RunRecord, Status};
use heddle_runner::sched::RunOptions;

use crate::cli::{rerun, Fail, EXIT_OK, EXIT_STAGE_FAILED};
use crate::report::ProgressMode;

/// Read a stored output: from the store by digest, else from where it was materialised.
fn artefact(store: &Store, root: &Path, digest: &Digest, path: Option<&String>) -> Option<Vec<u8>> {
    std::fs::read(store.blob_path(digest))
        .ok()
        .or_else(|| path.and_then(|p| std::fs::read(root.join(p)).ok()))
}

/// The report stages' outputs ending in `suffix`, as (src, digest, bytes).
fn report_outputs(
    store: &Store,
    root: &Path,
    rec: &RunRecord,
    suffix: &str,
) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (label, r) in &rec.instances {
        if !r.report || r.status.status != Status::Ok {
            continue;
        }
        for (name, entry) in &r.outputs {
            let path = r.output_paths.get(name);
            if !path.is_some_and(|p| p.ends_with(suffix)) {
                continue;
            }
            if let Some(bytes) = artefact(store, root, &entry.digest(), path) {
                out.push((format!("{label}#{name}"), entry.digest().to_string(), bytes));
            }
        }
    }
    out
}

pub fn tables(store: &Store, root: &Path, rec: &RunRecord) -> Vec<Table> {
    report_outputs(store, root, rec, ".md")
        .into_iter()
        .map(|(src, digest, bytes)| Table {
            src,
            digest,
            markdown: String::from_utf8_lossy(&bytes).into_owned(),
        })
        .collect()
}

pub fn plots(store: &Store, root: &Path, rec: &RunRecord) -> Result<Vec<PlotSpec>, Fail> {
    let mut out = Vec::new();
    for (src, _, bytes) in report_outputs(store, root, rec, ".plots.json") {
        let f: PlotFile = serde_json::from_slice(&bytes).map_err(|e| Fail {
            code: EXIT_STAGE_FAILED,
            msg: format!("error: {src} is not a plots file: {e}"),
        })?;
        out.extend(f.plots);
    }
    Ok(out)
}

pub fn write_report(store: &Store, root: &Path, rec: &RunRecord, out: &Path) -> Result<i32, Fail> {
    let t = tables(store, root, rec);
    let p = plots(store, root, rec)?;
    let page = html::render(rec, &t, &p).map_err(|e| Fail {
        code: EXIT_STAGE_FAILED,
        msg: format!("error: failed to draw the report: {e}"),
    })?;
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)
            .map_err(|e| Fail::invalid(format!("error: cannot create {}: {e}", d.display())))?;
    }
    std::fs::write(out, page)
        .map_err(|e| Fail::invalid(format!("error: cannot write {}: {e}", out.display())))?;
    println!(
        "wrote {} ({} tables, {} plots)",
        out.display(),
        t.len(),
        p.len()
    );
    Ok(EXIT_OK)
}

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
    f
}

fn block(kind: &str, attrs: Vec<(String, String)>, body: String) -> Segment {
    Segment::Block(entry::Block {
        kind: kind.into(),
        attrs,
        body,
    })
}

pub fn new_entry(
    store: &Store,
    root: &Path,
    rec: &RunRecord,
    out: &Path,
    title: Option<&str>,
) -> Result<i32, Fail> {
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
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)
            .map_err(|err| Fail::invalid(format!("error: cannot create {}: {err}", d.display())))?;
    }
    std::fs::write(out, e.render())
        .map_err(|err| Fail::invalid(format!("error: cannot write {}: {err}", out.display())))?;
    println!(
        "wrote {} from run {} ({} tables)",
        out.display(),
        rec.run_id,
        tables.len()
    );
    Ok(EXIT_OK)
}

fn read_entry(path: &Path) -> Result<Entry, Fail> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Fail::invalid(format!("error: cannot read {}: {e}", path.display())))?;
    Entry::parse(&text).map_err(|e| Fail::invalid(format!("error: {}: {e}", path.display())))
}

/// `--set` overrides that reproduce the entry's params.
fn overrides(e: &Entry) -> Result<Vec<(String, String)>, Fail> {
    let params: BTreeMap<String, serde_json::Value> = match e.front.get("params") {
        Some(p) => serde_json::from_str(p).map_err(|err| {
            Fail::invalid(format!(
                "error: params in the front matter are not JSON: {err}"
            ))
        })?,
        None => BTreeMap::new(),
    };
    Ok(params
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            (k, text)
        })
        .collect())
}

/// How the binary re-runs a pipeline for the logbook.
pub struct Rerun<'a> {
    pub root: &'a Path,
    pub store: Arc<Store>,
    pub progress: ProgressMode,
}

pub struct VerifyOptions {
    pub fresh: bool,
    pub runs: usize,
    /// A tolerance given on the command line; it overrides what the entry states or prints.
    pub tol: Option<Tolerance>,
}

/// The rule a block's numbers are judged by: the command line's tolerance, else the one the
/// block states, else the digits the entry printed.
fn rule_for(b: &entry::Block, cli: Option<Tolerance>, path: &Path) -> Result<Rule, Fail> {
    if let Some(t) = cli {
        return Ok(Rule::Stated(t));
    }
    let stated = b
        .stated_tolerance()
        .map_err(|e| Fail::invalid(format!("error: {}: {e}", path.display())))?;
    Ok(stated.map_or(Rule::Printed, Rule::Stated))
}

pub async fn verify(entry_path: &Path, rr: &Rerun<'_>, opts: &VerifyOptions) -> Result<i32, Fail> {
    let e = read_entry(entry_path)?;
    let file = PathBuf::from(
        e.front
            .get("pipeline_file")
            .ok_or_else(|| Fail::invalid("error: the entry names no pipeline_file"))?,
    );
    let file = if file.is_absolute() {
        file
    } else {
        rr.root.join(file)
    };
    let sets = overrides(&e)?;
    let rules = e
        .blocks()
        .map(|b| rule_for(b, opts.tol, entry_path))
        .collect::<Result<Vec<_>, _>>()?;
    let mut bad = 0usize;
    let mut good = 0usize;
    let mut unrecorded = 0usize;
    for n in 1..=opts.runs.max(1) {
        let private = if opts.fresh {
            Some(tempfile::tempdir().map_err(|err| Fail::invalid(format!("error: {err}")))?)
        } else {
            None
        };
        let store = match &private {
            Some(d) => Arc::new(
                Store::open(d.path()).map_err(|err| Fail::invalid(format!("error: {err}")))?,
            ),
            None => rr.store.clone(),
        };
        println!(
            "== verify {} run {n}/{}{}",
            entry_path.display(),
            opts.runs.max(1),
            if opts.fresh {
                " (fresh: every instance re-executed in a private cache)"
            } else {
                " (from the cache)"
            }
        );
        let ropts = RunOptions {
            jobs: default_jobs(),
            keep_going: true,
            force: Default::default(),
            no_cache: opts.fresh,
            run_id: record::new_run_id(),
            remote: None,
        };
        let rec = rerun(
            &file,
            &sets,
            store.clone(),
            Some(rr.store.clone()),
            ropts,
            rr.progress,
        )
        .await
        .map_err(|f| cannot_rerun(f, entry_path, &e.front["pipeline_file"]))?;
        let _ = record::save(rr.root, &rec);
        let tables = tables(&store, rr.root, &rec);
        for (b, rule) in e.blocks().zip(&rules) {
            match b.kind.as_str() {
                "table" => {
                    let src = b.src().unwrap_or("");
                    if n == 1 {
                        println!("table {src}: numbers must agree {rule}");
                    }
                    match tables.iter().find(|t| t.src == src) {
                        None => {
                            bad += 1;
                            println!("DIFF  table {src}: not produced by this run");
                        }
                        Some(t) => {
                            for v in compare_blocks(&b.body, &t.markdown, *rule) {
                                if !v.recorded {
                                    unrecorded += 1;
                                    println!(
                                        "new   {src} {}: now {} (the entry did not record it)",
                                        v.place, v.now
                                    );
                                } else if v.ok {
                                    good += 1;
                                    println!("ok    {src} {}: {} | {}", v.place, v.entry, v.now);
                                } else {
                                    bad += 1;
                                    let allowed = v
                                        .allowed
                                        .map(|a| format!(" (allowed {a})"))
                                        .unwrap_or_default();
                                    println!(
                                        "DIFF  {src} {}: entry {} | now {}{allowed}",
                                        v.place, v.entry, v.now
                                    );
                                }
                            }
                        }
                    }
                }
                "failures" => {
                    let was = entry::parse_failures(&b.body);
                    let now = entry::parse_failures(&entry::failures_block(&rec));
                    for (label, (state, class)) in &was {
                        match now.get(label) {
                            Some((s2, c2)) if s2 == state && c2 == class => {
                                good += 1;
                                println!("ok    failure {label}: {state} {class} reproduced");
                            }
                            Some((s2, c2)) => {
                                bad += 1;
                                println!(
                                    "DIFF  failure {label}: entry {state} {class} | now {s2} {c2}"
                                );
                            }
                            None => {
                                bad += 1;
                                println!("DIFF  failure {label}: entry {state} {class} | now it succeeds");
                            }
                        }
                    }
                    for (label, (state, class)) in &now {
                        if !was.contains_key(label) {
                            bad += 1;
                            println!("DIFF  failure {label}: entry ok | now {state} {class}");
                        }
                    }
                }
                _ => {}
            }
        }
    }
    println!(
        "verify: {good} values reproduced, {bad} differ{}{}",
        if unrecorded > 0 {
            format!(", {unrecorded} not recorded in the entry")
        } else {
            String::new()
        },
        if bad == 0 && unrecorded == 0 {
            " — the entry reproduces"
        } else {
            ""
        }
    );
    Ok(if bad == 0 { EXIT_OK } else { EXIT_STAGE_FAILED })
}

/// A rerun that cannot start (an image or engine missing, a pipeline that no longer loads)
/// says which entry could not be verified before the cause.
fn cannot_rerun(f: Fail, entry_path: &Path, pipeline_file: &str) -> Fail {
    Fail {
        code: f.code,
        msg: format!(
            "error: cannot verify {}: its pipeline {pipeline_file} cannot run here\n  caused by: {}",
            entry_path.display(),
            f.msg.trim_start_matches("error: ")
        ),
    }
}

pub async fn refresh(entry_path: &Path, rr: &Rerun<'_>) -> Result<i32, Fail> {
    let mut e = read_entry(entry_path)?;
    let file = PathBuf::from(
        e.front
            .get("pipeline_file")
            .ok_or_else(|| Fail::invalid("error: the entry names no pipeline_file"))?,
    );
    let file = if file.is_absolute() {
        file
    } else {
        rr.root.join(file)
    };
    let sets = overrides(&e)?;
    let ropts = RunOptions {
        jobs: default_jobs(),
        keep_going: true,
        force: Default::default(),
        no_cache: false,
        run_id: record::new_run_id(),
        remote: None,
    };
    let rec = rerun(&file, &sets, rr.store.clone(), None, ropts, rr.progress).await?;
    let _ = record::save(rr.root, &rec);
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
    std::fs::write(entry_path, e.render()).map_err(|err| {
        Fail::invalid(format!(
            "error: cannot write {}: {err}",
            entry_path.display()
        ))
    })?;
    println!("refreshed {} from run {}", entry_path.display(), rec.run_id);
    for m in &missing {
        println!("warning: table {m} was not produced by this run; its block is unchanged");
    }
    Ok(EXIT_OK)
}

fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

//! `heddle stages list | show NAME` and `heddle init [--example NAME]`: the stage library as a
//! user sees it, and a project scaffold that runs with nothing copied from heddle's repository
//! (its stages come from the library in the binary, `heddle_runner::stage_lib`; the JSON Schemas
//! its pipeline names for editors are written beside it).

use crate::printable::printable;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use heddle_runner::diag::Source;
use heddle_runner::model::{toml_to_json, value_text};
use heddle_runner::spec::{self, StageDefSpec};
use heddle_runner::spec_schema::SchemaKind;
use heddle_runner::stage_lib;

use clap::Subcommand;

use crate::error::{Error, EXIT_OK};
use crate::session::Session;

#[path = "init_dfc.rs"]
mod init_dfc;

#[derive(Subcommand, Debug)]
pub enum StagesCmd {
    /// Every definition: name, origin (project or library), first line of its description.
    List,
    /// One definition: params (type, default, description), inputs, outputs.
    Show { name: String },
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// compile-onnx (any ONNX + images, onnxruntime), compile-onnx-dfc (the same through the
    /// Hailo DFC) or mezo-ort.
    #[arg(long, default_value = "compile-onnx")]
    example: String,
    #[arg(default_value = ".")]
    dir: PathBuf,
    #[command(flatten)]
    dfc: init_dfc::DfcArgs,
}

pub fn stages(s: &Session, cmd: &StagesCmd) -> Result<i32, Error> {
    let root = s.project_root();
    let out = match cmd {
        StagesCmd::List => list(&root, &s.stage_lib())?,
        StagesCmd::Show { name } => show(&root, name, &s.stage_lib())?,
    };
    // Descriptions and names come from the project's stage.toml files.
    print!("{}", printable(&out));
    Ok(EXIT_OK)
}

pub fn init(a: &InitArgs) -> Result<i32, Error> {
    let config = init_dfc::config(&a.dfc, &a.example)?;
    print!("{}", scaffold(&a.dir, &a.example, config)?);
    Ok(EXIT_OK)
}

/// Examples `heddle init --example NAME` writes to `pipelines/NAME.toml`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "compile-onnx",
        include_str!("../../pipelines/compile-onnx.toml"),
    ),
    (
        "compile-onnx-dfc",
        include_str!("../../pipelines/compile-onnx-dfc.toml"),
    ),
    ("mezo-ort", include_str!("../../pipelines/mezo-ort.toml")),
];

/// `heddle stages list`: project definitions first (they win), then the library's.
fn list(root: &Path, lib_base: &Path) -> Result<String, Error> {
    let mut names: Vec<(String, &str)> = Vec::new();
    project_defs(&root.join("stages"), "", &mut names);
    names.sort();
    for n in stage_lib::definitions() {
        if !names.iter().any(|(p, _)| *p == n) {
            names.push((n, "library"));
        }
    }
    let width = names.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, origin) in &names {
        let def = load(root, name, lib_base)?;
        let desc = def.stage.get_ref().description.clone().unwrap_or_default();
        let first = first_sentence(&desc);
        let _ = writeln!(out, "{name:width$}  {origin:7}  {first}");
    }
    Ok(out)
}

/// `heddle stages show NAME`: description, params (type, default, description), inputs, outputs.
fn show(root: &Path, name: &str, lib_base: &Path) -> Result<String, Error> {
    let def = load(root, name, lib_base)?;
    let st = def.stage.get_ref();
    let mut out = format!("{name}\n");
    if let Some(d) = &st.description {
        let _ = writeln!(out, "  {}", d.replace('\n', "\n  "));
    }
    if let Some(inc) = &st.include {
        let files: Vec<&str> = inc.iter().map(|i| i.get_ref().as_str()).collect();
        let _ = writeln!(out, "includes: {}", files.join(", "));
    }
    out.push_str("params:\n");
    for (k, p) in &def.params {
        let p = p.get_ref();
        let default = match &p.default {
            Some(d) => format!(" = {}", value_text(&toml_to_json(d.get_ref()))),
            None => " (required)".to_string(),
        };
        let desc = p
            .description
            .as_deref()
            .map(|d| format!("  {d}"))
            .unwrap_or_default();
        let choices = match &p.choices {
            Some(c) => {
                let c: Vec<String> = c.iter().map(|v| value_text(&toml_to_json(v))).collect();
                format!(" (one of {})", c.join(", "))
            }
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {}: {}{default}{choices}{desc}",
            k.get_ref(),
            p.ty.get_ref()
        );
    }
    out.push_str("inputs:\n");
    for (k, i) in &def.inputs {
        let i = i.get_ref();
        let opt = if i.optional { " (optional)" } else { "" };
        let desc = i
            .description
            .as_deref()
            .map(|d| format!("  {d}"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {}{opt}{desc}", k.get_ref());
    }
    out.push_str("outputs:\n");
    for (k, v) in &def.outputs {
        let file = v.get_ref().as_str().unwrap_or("?");
        let _ = writeln!(out, "  {}: {file}", k.get_ref());
    }
    Ok(out)
}

/// `heddle init [--example NAME]` in `dir`: `.heddle/`, `.gitignore`, `schemas/` and
/// `pipelines/NAME.toml`. Never overwrites a file.
///
/// The example's first line, `#:schema ../schemas/pipeline.schema.json`, is the one it has in
/// heddle's repository, and it resolves in the new project too: the schemas are written to the
/// project's own `schemas/` (not the ignored `.heddle/`), so they are committed with the project
/// and an editor finds them in every clone, with no network and at the version of the heddle that
/// wrote the project. `heddle schema pipeline|stage` rewrites them after an upgrade.
fn scaffold(dir: &Path, example: &str, config: Option<init_dfc::Config>) -> Result<String, Error> {
    let Some((_, text)) = EXAMPLES.iter().find(|(n, _)| *n == example) else {
        let known: Vec<&str> = EXAMPLES.iter().map(|(n, _)| *n).collect();
        return Err(Error::Usage(format!(
            "no example `{example}` (examples: {})",
            known.join(", ")
        )));
    };
    let mut files: Vec<(PathBuf, String)> = vec![
        (
            dir.join("pipelines").join(format!("{example}.toml")),
            text.to_string(),
        ),
        (dir.join(".gitignore"), "out/\n.heddle/\n".into()),
    ];
    for kind in SchemaKind::ALL {
        files.push((dir.join("schemas").join(kind.file_name()), kind.text()));
    }
    if let Some(c) = &config {
        files.push((dir.join(".heddle").join("config.toml"), c.text.clone()));
    }
    // Anything at a path, a dangling link included (`exists` follows links, and writing
    // would create the link's target wherever it points), is the user's: never written.
    if let Some((p, _)) = files
        .iter()
        .find(|(p, _)| std::fs::symlink_metadata(p).is_ok())
    {
        return Err(Error::Usage(format!(
            "{} exists; heddle init writes only new files",
            p.display()
        )));
    }
    let heddle = dir.join(".heddle");
    let folders = [heddle.clone(), dir.join("pipelines"), dir.join("schemas")];
    // A folder heddle would write into that is a link would take the files elsewhere.
    if let Some(link) = folders
        .iter()
        .find(|f| std::fs::symlink_metadata(f).is_ok_and(|m| m.file_type().is_symlink()))
    {
        return Err(Error::Usage(format!(
            "{} is a symbolic link; heddle init does not write through links it did not create",
            link.display()
        )));
    }
    for f in &folders {
        std::fs::create_dir_all(f).map_err(|e| io_fail(f, e))?;
    }
    for (p, bytes) in &files {
        // `create_new` refuses whatever appeared meanwhile, a link included, and never
        // follows one.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .and_then(|mut f| std::io::Write::write_all(&mut f, bytes.as_bytes()))
            .map_err(|e| io_fail(p, e))?;
    }
    Ok(match config {
        None => format!(
            "created .heddle/, .gitignore, schemas/ and pipelines/{example}.toml\nnext: heddle run pipelines/{example}.toml\n"
        ),
        Some(c) => format!(
            "created .heddle/, .heddle/config.toml ({}), .gitignore, schemas/ and pipelines/{example}.toml\n\
             next: put your model at model.onnx and your images in images/, then heddle run pipelines/{example}.toml\n",
            c.route
        ),
    })
}

/// Up to the first ". " (a sentence, not the dot of `.npy`), at most 100 characters.
fn first_sentence(desc: &str) -> String {
    let flat = desc.replace('\n', " ");
    let s = flat.split(". ").next().unwrap_or("").trim_end_matches('.');
    match s.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn io_fail(p: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op: "failed to write",
        path: p.to_path_buf(),
        source,
    }
}

fn load(root: &Path, name: &str, lib_base: &Path) -> Result<StageDefSpec, Error> {
    let dir = stage_lib::locate(root, name, lib_base)?.ok_or_else(|| {
        Error::Usage(format!(
            "no stage definition `{name}` (see `heddle stages list`)"
        ))
    })?;
    let file = dir.join("stage.toml");
    let text = std::fs::read_to_string(&file).map_err(|source| Error::Io {
        op: "failed to read",
        path: file.clone(),
        source,
    })?;
    Ok(spec::parse(&Source::new(&file, text))?)
}

fn project_defs(dir: &Path, prefix: &str, out: &mut Vec<(String, &'static str)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        if p.join("stage.toml").is_file() {
            out.push((name, "project"));
        } else if p.is_dir() && prefix.is_empty() {
            project_defs(&p, &format!("{name}/"), out);
        }
    }
}

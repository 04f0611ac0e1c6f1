//! Packs the repository's `stages/` tree (the stage library that ships with heddle) into the
//! binary: a generated table of `(relative path, include_bytes!)` plus its sha256 computed here,
//! so `cargo install` gives a heddle that resolves `uses = "onnx/import"` with no checkout beside
//! it. A build script rather than a crate (`include_dir`) because it needs no dependency and the
//! hash is computed once at build time, not at every start.
use std::io::Write;

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // The same files definition_digests skips: they never enter a key.
        if name == "__pycache__" || name.ends_with(".pyc") || name.starts_with('.') {
            continue;
        }
        let p = e.path();
        if p.is_dir() {
            walk(&p, base, out);
        } else {
            let rel = p
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, p));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let stages = manifest.join("..").join("stages");
    let stages = stages.canonicalize().unwrap_or(stages);
    println!("cargo:rerun-if-changed={}", stages.display());
    let mut files = Vec::new();
    walk(&stages, &stages, &mut files);
    files.sort();
    // Directories are watched for added/removed files, each file for edits.
    for (_, p) in &files {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .filter_map(|(_, p)| p.parent().map(Path::to_path_buf))
        .collect();
    dirs.dedup();
    for d in dirs {
        println!("cargo:rerun-if-changed={}", d.display());
    }
    let mut hasher = Sha256::new();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // Written beside, then renamed over: a target dir seeded with hard links (`cp -al`) shares
    // this file's inode with other checkouts, and writing it in place would hand them this
    // checkout's stage paths.
    let tmp = out_dir.join("stage_lib_files.rs.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::File::create(&tmp).unwrap();
    writeln!(f, "pub static FILES: &[(&str, &[u8])] = &[").unwrap();
    for (rel, p) in &files {
        let bytes = std::fs::read(p).unwrap();
        hasher.update(rel.as_bytes());
        hasher.update([0u8]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
        writeln!(
            f,
            "    ({rel:?}, include_bytes!({:?})),",
            p.display().to_string()
        )
        .unwrap();
    }
    writeln!(f, "];").unwrap();
    writeln!(f, "pub const HASH: &str = {:?};", hex(&hasher.finalize())).unwrap();
    drop(f);
    std::fs::rename(&tmp, out_dir.join("stage_lib_files.rs")).unwrap();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

//! The exact text of the binary's error messages: `error: <headline>`, then one
//! `  caused by: <cause>` line per link of the chain (the OS or engine error included), and the
//! documented exit code. Each test runs the real binary against a real filesystem.

mod support;

use support::{Project, Run};

/// `heddle run p.toml` with the cache at `cache` instead of the project's.
fn run_with_cache(p: &Project, cache: &std::path::Path) -> Run {
    p.cmd(&["run", "p.toml", "--progress", "plain"])
        .env("HEDDLE_CACHE_DIR", cache)
        .output()
        .unwrap()
        .into()
}

const PIPELINE: &str = "[pipeline]\nname = \"e\"\n[stages.a]\nrun = \"echo a > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n";

#[test]
fn a_cache_dir_under_a_file_names_the_os_error() {
    let p = Project::new();
    p.file("p.toml", PIPELINE).file("plain-file", "");
    let cache = p.path("plain-file/cache");
    let r = run_with_cache(&p, &cache).code(2);
    assert_eq!(
        r.stderr,
        format!(
            "error: cannot open the cache at {c}\n  caused by: failed to create directory {c}/objects\n  caused by: Not a directory (os error 20)\n",
            c = cache.display()
        )
    );
}

#[test]
fn a_missing_pipeline_names_the_os_error() {
    let p = Project::new();
    let r = p.heddle(&["plan", "missing.toml"]).code(2);
    assert_eq!(
        r.stderr,
        "error: cannot read pipeline missing.toml\n  caused by: No such file or directory (os error 2)\n"
    );
}

#[test]
fn a_run_that_was_never_recorded() {
    let p = Project::new();
    let r = p.heddle(&["show", "last"]).code(2);
    assert_eq!(
        r.stderr,
        format!(
            "error: no runs recorded under {}\n",
            p.path(".heddle/runs").display()
        )
    );
}

#[test]
fn status_without_a_lock_says_how_to_write_one() {
    let p = Project::new();
    p.file("p.toml", PIPELINE);
    let r = p.heddle(&["status", "p.toml"]).code(2);
    assert_eq!(
        r.stderr,
        format!(
            "error: failed to read lock file {}: No such file or directory (os error 2)\n  = help: `heddle run` writes it after a successful run; `heddle lock` writes it from the cache\n",
            std::path::Path::new("p.lock").display()
        )
    );
}

/// An unwritable cache: a read-only filesystem when this test may mount one (root), else a
/// folder without write permission (root would write through it).
#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_cache_dir_names_the_os_error() {
    use support::tmpfs::Tmpfs;
    let p = Project::new();
    p.file("p.toml", PIPELINE);
    let cache = p.path("ro-cache");
    std::fs::create_dir_all(&cache).unwrap();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut _mounted = None;
    let cause = if root {
        let Some(m) = Tmpfs::mount(&cache, "ro,size=64k") else {
            return;
        };
        _mounted = Some(m);
        "Read-only file system (os error 30)"
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o555)).unwrap();
        "Permission denied (os error 13)"
    };
    let r = run_with_cache(&p, &cache).code(2);
    assert_eq!(
        r.stderr,
        format!(
            "error: cannot open the cache at {c}\n  caused by: failed to create directory {c}/objects\n  caused by: {cause}\n",
            c = cache.display()
        )
    );
}

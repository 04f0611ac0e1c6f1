//! The `heddle` command: parses arguments, hands validated input to `heddle-runner`, renders
//! its events, and maps every outcome to a documented exit code:
//! 0 success, 1 a stage failed, 2 invalid pipeline, usage or environment, 130 interrupted.

// glibc's malloc grows a per-thread arena with mprotect and consolidates on free; a no-op of a
// 1,000-instance matrix spent about a third of its time there (perf, issue 6).
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod artefacts;
mod cli;
mod commands;
mod error;
mod progress;
mod remote_cache;
mod session;
mod style;

fn main() {
    // `heddle show --json | head` should end quietly, like any unix tool, not panic on EPIPE.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let code = cli::main();
    std::process::exit(code);
}

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
mod completion;
mod dfc;
mod error;
mod printable;
mod progress;
mod remote_cache;
mod remote_setup;
mod session;
mod style;
mod trust;

/// mimalloc's `mi_option_purge_delay` (the same index in its v2 and v3 `mimalloc.h`).
#[cfg(unix)]
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

#[cfg(unix)]
extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// mimalloc hands freed pages back to the kernel 10 ms after they empty, and a page touched
/// again is a fresh zeroed page: a no-op run of a large matrix spent much of its time in the
/// kernel's `clear_page_erms` zeroing pages, about three times the system time of a 1 s delay
/// (issue 14; benches/RESULTS.md, M7). heddle is a short-lived process whose memory is reused
/// within the run; a long run still gives back what it stops using, a second later.
#[cfg(unix)]
fn keep_freed_memory_a_while() {
    unsafe {
        mi_option_set(MI_OPTION_PURGE_DELAY, 1000);
        debug_assert_eq!(mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
    }
}

fn main() {
    quiet_on_a_closed_output();
    #[cfg(unix)]
    keep_freed_memory_a_while();
    let code = cli::main();
    std::process::exit(code);
}

/// `heddle runs --json | head` should end quietly, like any unix tool whose reader went away,
/// not with a panic about a broken pipe. It exits 0: the reader took what it wanted, and a
/// `set -o pipefail` script must not fail on `heddle completions bash | head -1` (141, the
/// status of a tool killed by SIGPIPE, did). SIGPIPE itself stays ignored (Rust's default)
/// rather than restored: heddle also writes to sockets, and a TLS server that closes the
/// connection (a REAPI server refusing a client without a certificate) must be an error the
/// remote cache turns into one warning, not a signal that kills the run with no record (rustls
/// writes with `writev`, which cannot suppress the signal). Commands that write through
/// `io::Write` themselves (completions, man) use [`commands::shell::write_stdout`].
fn quiet_on_a_closed_output() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let printing = message.starts_with("failed printing to stdout")
            || message.starts_with("failed printing to stderr");
        if printing && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}

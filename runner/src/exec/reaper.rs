//! A watchdog that kills the process groups of running host stages if heddle itself dies
//! without cleaning up (`kill -9`, an abort, the OOM killer).
//!
//! Why not `PR_SET_PDEATHSIG` in the child: setting it needs code between `fork` and `exec`,
//! which forces the standard library onto `fork()`, and `fork()` copies the page tables of a
//! large, multi-threaded heddle for every stage (benches/RESULTS.md, M2).
//! Without it stages start through `posix_spawn` (`vfork`-like). It also only reached the
//! group's leader, not the commands the leader started.
//!
//! The watchdog is a child forked once, before the first stage spawn. It holds the read end of a
//! socket pair; heddle sends it `+pgid` when a group starts and `-pgid` once the group is gone.
//! When the socket reports end of file (heddle is gone, however it died) it sends SIGKILL to
//! every group still registered and exits. The child runs only async-signal-safe system
//! calls and never allocates, so forking it from a multi-threaded process is sound.
//!
//! A stage's descendant that left its group (`setsid`) is not in any registered group; heddle
//! kills those itself at the stage's end ([`super::contain`]), but when heddle dies they go to
//! PID 1. So at end of file the watchdog also scans `/proc` for processes whose environment
//! holds this heddle's stage-token prefix (`HEDDLE_STAGE_TOKEN=<pid>.<start>.`) and kills them,
//! pass after pass until a pass finds none (a killed daemon's children are found on the next
//! one). The scan runs once, after heddle is gone, so it costs a run nothing.

use std::sync::{Mutex, OnceLock};

/// Largest number of groups the watchdog tracks at once (far above any job limit).
const CAPACITY: usize = 4096;

static SENDER: OnceLock<Option<Mutex<i32>>> = OnceLock::new();

fn sender() -> Option<&'static Mutex<i32>> {
    SENDER.get_or_init(start).as_ref()
}

/// Start the watchdog if it is not running yet. Called before a stage is spawned, never
/// after: a stage that starts before the watchdog exists is covered by nothing if heddle dies
/// in between (the fork takes milliseconds on a large heddle, ample time for a stage to start
/// and for a `kill -9` to land). Once the watchdog runs, a stage not registered yet is still
/// found by its stage token when heddle dies.
pub fn arm() {
    sender();
}

/// Register a running process group.
pub fn watch(pgid: u32) {
    send(pgid as i32);
}

/// The group has been killed and reaped; its id may be reused.
pub fn forget(pgid: u32) {
    send(-(pgid as i32));
}

fn send(msg: i32) {
    let Some(fd) = sender() else { return };
    let fd = fd.lock().expect("reaper socket");
    let buf = msg.to_ne_bytes();
    // MSG_NOSIGNAL: a watchdog that died must not take heddle with it through SIGPIPE.
    unsafe {
        libc::send(*fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL);
    }
}

fn start() -> Option<Mutex<i32>> {
    let mut fds = [0i32; 2];
    // SEQPACKET keeps each 4-byte message whole; CLOEXEC keeps stages from inheriting the
    // sending end (a stage holding it would keep the watchdog from ever seeing end of file).
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        tracing::warn!("no watchdog for stage processes: socketpair failed");
        return None;
    }
    let (rx, tx) = (fds[0], fds[1]);
    // Built before the fork: the child must not allocate.
    let needle = format!(
        "{}={}",
        super::contain::TOKEN_VAR,
        super::contain::token_prefix()
    );
    match unsafe { libc::fork() } {
        -1 => {
            unsafe {
                libc::close(rx);
                libc::close(tx);
            }
            tracing::warn!("no watchdog for stage processes: fork failed");
            None
        }
        0 => unsafe { watchdog(rx, needle.as_bytes()) },
        _ => {
            unsafe { libc::close(rx) };
            Some(Mutex::new(tx))
        }
    }
}

/// The child. Only async-signal-safe calls from here on.
unsafe fn watchdog(rx: i32, needle: &[u8]) -> ! {
    // Keep nothing of heddle's open: a copied lock file would keep its lock held, a copied
    // pipe would keep a reader from seeing end of file.
    if libc::dup2(rx, 0) < 0 {
        libc::_exit(1);
    }
    if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
        for fd in 1..1024 {
            libc::close(fd);
        }
    }
    // Ctrl-C reaches the whole foreground group; heddle handles it and forgets its groups.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
        libc::signal(sig, libc::SIG_IGN);
    }
    libc::prctl(libc::PR_SET_NAME, c"heddle-reaper".as_ptr());
    let mut groups = [0i32; CAPACITY];
    let mut len = 0usize;
    loop {
        let mut buf = [0u8; 4];
        let n = libc::read(0, buf.as_mut_ptr().cast(), 4);
        if n == 4 {
            let msg = i32::from_ne_bytes(buf);
            if msg > 0 && len < CAPACITY {
                groups[len] = msg;
                len += 1;
            } else if msg < 0 {
                if let Some(i) = groups[..len].iter().position(|g| *g == -msg) {
                    groups[i] = groups[len - 1];
                    len -= 1;
                }
            }
            continue;
        }
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // End of file (or an error): heddle is gone.
        for g in &groups[..len] {
            libc::killpg(*g, libc::SIGKILL);
        }
        kill_tokened(needle);
        libc::_exit(0);
    }
}

/// Most passes over `/proc`; each kills what it finds.
const SCAN_PASSES: usize = 50;

/// SIGKILL every process whose environment has an entry starting with `needle`, until a pass
/// over `/proc` finds none. Async-signal-safe: system calls and stack buffers only.
unsafe fn kill_tokened(needle: &[u8]) {
    let me = libc::getpid();
    for _ in 0..SCAN_PASSES {
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut found = 0;
        let mut dents = [0u8; 8192];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, dents.as_mut_ptr(), dents.len());
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while off + 19 < n as usize {
                // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
                let reclen = u16::from_ne_bytes([dents[off + 16], dents[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = &dents[off + 19..(off + reclen).min(n as usize)];
                let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
                off += reclen;
                let Some(pid) = parse_pid(name) else { continue };
                if pid != me && environ_has(name, needle) {
                    libc::kill(pid, libc::SIGKILL);
                    found += 1;
                }
            }
        }
        libc::close(dir);
        if found == 0 {
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 5_000_000,
        };
        libc::nanosleep(&pause, std::ptr::null_mut());
    }
}

fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 9 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(name.iter().fold(0i32, |n, d| n * 10 + i32::from(*d - b'0')))
}

/// Whether `/proc/<pid>/environ` holds an entry starting with `needle`, read in pieces.
unsafe fn environ_has(pid: &[u8], needle: &[u8]) -> bool {
    let mut path = [0u8; 32];
    let parts: [&[u8]; 3] = [b"/proc/", pid, b"/environ"];
    let mut len = 0;
    for p in parts {
        path[len..len + p.len()].copy_from_slice(p);
        len += p.len();
    }
    let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let found = environ_matches(needle, |buf| {
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
    });
    libc::close(fd);
    found
}

/// Scan a NUL-separated environment delivered by `read` (which returns the bytes it put in the
/// buffer, 0 at the end) for an entry starting with `needle`.
fn environ_matches(needle: &[u8], mut read: impl FnMut(&mut [u8]) -> isize) -> bool {
    let mut buf = [0u8; 4096];
    // How much of `needle` the current entry has matched so far; None once it differs.
    let mut matched = Some(0usize);
    loop {
        let n = read(&mut buf);
        if n <= 0 {
            return false;
        }
        for &b in &buf[..n as usize] {
            if b == 0 {
                matched = Some(0);
                continue;
            }
            if let Some(i) = matched {
                matched = (needle[i] == b).then_some(i + 1);
                if matched == Some(needle.len()) {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(env: &[u8], needle: &[u8], piece: usize) -> bool {
        let mut at = 0;
        environ_matches(needle, |buf| {
            let n = piece.min(buf.len()).min(env.len() - at);
            buf[..n].copy_from_slice(&env[at..at + n]);
            at += n;
            n as isize
        })
    }

    #[test]
    fn the_scan_matches_an_entry_start_across_reads() {
        let env = b"A=1\0X=HEDDLE_STAGE_TOKEN=9.f.1\0HEDDLE_STAGE_TOKEN=7.e.3\0";
        for piece in [1, 3, 4096] {
            assert!(scan(env, b"HEDDLE_STAGE_TOKEN=7.e.", piece));
            assert!(
                !scan(env, b"HEDDLE_STAGE_TOKEN=9.f.", piece),
                "inside a value"
            );
            assert!(!scan(env, b"HEDDLE_STAGE_TOKEN=8.", piece));
        }
        assert_eq!(parse_pid(b"12345"), Some(12345));
        assert_eq!(parse_pid(b"self"), None);
    }
}

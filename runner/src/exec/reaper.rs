//! A watchdog that kills the process groups of running host stages if heddle itself dies
//! without cleaning up (`kill -9`, an abort, the OOM killer).
//!
//! Why not `PR_SET_PDEATHSIG` in the child: setting it needs code between `fork` and `exec`,
//! which forces the standard library onto `fork()`, and `fork()` copies the page tables of a
//! large, multi-threaded heddle for every stage (about 0.7 ms a stage on a 1,000-stage chain).
//! Without it stages start through `posix_spawn` (`vfork`-like). It also only reached the
//! group's leader, not the commands the leader started.
//!
//! The watchdog is a child forked once, on the first stage spawn. It holds the read end of a
//! socket pair; heddle sends it `+pgid` when a group starts and `-pgid` once the group is gone.
//! When the socket reports end of file (heddle is gone, however it died) it sends SIGKILL to
//! every group still registered and exits. The child runs only async-signal-safe system
//! calls and never allocates, so forking it from a multi-threaded process is sound.

use std::sync::{Mutex, OnceLock};

/// Largest number of groups the watchdog tracks at once (far above any job limit).
const CAPACITY: usize = 4096;

static SENDER: OnceLock<Option<Mutex<i32>>> = OnceLock::new();

fn sender() -> Option<&'static Mutex<i32>> {
    SENDER.get_or_init(start).as_ref()
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
    match unsafe { libc::fork() } {
        -1 => {
            unsafe {
                libc::close(rx);
                libc::close(tx);
            }
            tracing::warn!("no watchdog for stage processes: fork failed");
            None
        }
        0 => unsafe { watchdog(rx) },
        _ => {
            unsafe { libc::close(rx) };
            Some(Mutex::new(tx))
        }
    }
}

/// The child. Only async-signal-safe calls from here on.
unsafe fn watchdog(rx: i32) -> ! {
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
        libc::_exit(0);
    }
}

//! Whether a process still lives on this machine: `heddle gc --containers` spares the containers
//! of runs whose heddle is alive, and the tests ask the same of the processes they start.

/// Whether process `pid` exists and is not a zombie. A zombie counts as dead: its work is over,
/// and a machine whose PID 1 does not reap orphans keeps killed ones as zombies.
pub fn pid_alive(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // `pid (comm) state …`; comm may hold spaces and parentheses.
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z'),
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Without /proc, assume alive: sparing a leftover beats killing a live run.
        let _ = pid;
        true
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::pid_alive;

    #[test]
    fn this_process_lives_and_a_reaped_child_does_not() {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }

    #[test]
    fn an_unreaped_child_that_exited_is_a_zombie_and_counts_as_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let stat = format!("/proc/{pid}/stat");
        // Until it is reaped the exited child stays a zombie in /proc.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z"))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!pid_alive(pid));
        child.wait().unwrap();
    }
}

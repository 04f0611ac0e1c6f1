//! The skip-or-fail rule for tests that need a tool this machine may not have.

/// `found`, or `None` after printing that `what` skipped because of `why`. When the environment
/// sets `require_var` to `1` (tests/all.sh does after installing the tool), a skip is a failure
/// instead, so a suite that should have run the check cannot pass without it.
pub fn found_or_skip<T>(found: Option<T>, require_var: &str, what: &str, why: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    if std::env::var(require_var).as_deref() == Ok("1") {
        panic!("{what}: {require_var}=1 but {why}");
    }
    eprintln!(
        "\n**************** SKIPPED {what}: {why}; set {require_var}=1 to make this a failure ****************\n"
    );
    None
}

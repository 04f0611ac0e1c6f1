//! Substring checks on what heddle printed or wrote, showing the whole text when they fail: one
//! line at the call site instead of the five that `assert!(text.contains(..), "{}", text)` takes
//! once rustfmt wraps it, so a test reads as the list of things it expects.

/// Fails, showing `text`, unless it holds `needle`.
#[track_caller]
pub fn assert_contains(text: &str, needle: &str) {
    assert!(
        text.contains(needle),
        "expected to find {needle:?} in:\n{}",
        shown(text)
    );
}

/// Fails, showing `text`, if it holds `needle`.
#[track_caller]
pub fn assert_lacks(text: &str, needle: &str) {
    assert!(
        !text.contains(needle),
        "expected no {needle:?} in:\n{}",
        shown(text)
    );
}

/// `text` as it reads, or escaped when it holds control characters (colour codes) that a
/// terminal would act on instead of showing.
fn shown(text: &str) -> String {
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        format!("{text:?}")
    } else {
        text.to_string()
    }
}

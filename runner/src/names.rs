//! Names are not paths: an instance label or a gathered member's `k=v,...` becomes one folder
//! name through [`path_segment`], whatever the matrix values hold.
//!
//! A matrix value is user data (`"../../etc"`, a URL, a value with a newline). Used raw, it
//! would become part of `out/<pipeline>/<label>/` and of the sandbox's `in/<name>/<member>/`
//! paths, and a `/` or `..` in it would write outside the project. The encoding is
//! percent-style and reversible ([`decode_segment`]): every byte outside a safe set becomes
//! `%XX`, and the few whole-name hazards are escaped too. A name made only of safe characters
//! is unchanged, so existing labels, folders and cache keys stay byte-identical.
//!
//! Escaped: `%` itself; `/`, `\`, NUL and every control character (newline included); the
//! characters Windows forbids in names (`<>:"|?*`); a leading `-` (read as an option by
//! tools handed the path); a trailing `.` or space (dropped by Windows); a name that is `.`,
//! `..` or empty; and Windows' reserved device names (`CON`, `NUL`, `COM1`, `LPT9`, also with
//! an extension such as `nul.txt`). A name longer than [`MAX_SEGMENT`] bytes after encoding is
//! cut and suffixed with a hash of the whole (the one case that is not reversible, and
//! unambiguous all the same).

use std::borrow::Cow;

use sha2::{Digest as _, Sha256};

/// Most filesystems cap a name at 255 bytes; leave room for temp prefixes heddle adds.
pub const MAX_SEGMENT: usize = 200;

fn safe_char(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric() || " !#$&'()+,-.;=@[]^_`{}~".contains(c)
    } else {
        // Non-ASCII letters are fine in names; invisible controls (U+0085, U+2028...) are not.
        !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}')
    }
}

const RESERVED: [&str; 4] = ["CON", "PRN", "AUX", "NUL"];

fn is_windows_reserved(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or("").trim_end();
    let upper = stem.to_ascii_uppercase();
    if RESERVED.contains(&upper.as_str()) {
        return true;
    }
    let b = upper.as_bytes();
    b.len() == 4 && (upper.starts_with("COM") || upper.starts_with("LPT")) && b[3].is_ascii_digit()
}

/// The folder name for `name` (see the module docs).
pub fn path_segment(name: &str) -> Cow<'_, str> {
    let hazard_start = name.starts_with('-');
    let hazard_end = name.ends_with(['.', ' ']);
    let dots = name == "." || name == "..";
    let whole = name.is_empty() || dots || is_windows_reserved(name);
    if !hazard_start
        && !hazard_end
        && !whole
        && name.len() <= MAX_SEGMENT
        && name.chars().all(safe_char)
    {
        return Cow::Borrowed(name);
    }
    if name.is_empty() {
        return Cow::Borrowed("%");
    }
    let mut out = String::with_capacity(name.len() + 8);
    let last = name.len() - 1;
    for (i, c) in name.char_indices() {
        let escape = !safe_char(c)
            || (i == 0 && (c == '-' || whole))
            || (i == last && (c == '.' || c == ' '))
            || (dots && c == '.');
        if escape {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    if out.len() > MAX_SEGMENT {
        let hash = hex::encode(&Sha256::digest(name.as_bytes())[..8]);
        let mut cut = MAX_SEGMENT - hash.len() - 1;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        // Do not leave half an escape at the cut.
        let tail = out.len().saturating_sub(2);
        if let Some(pct) = out[tail..].find('%') {
            out.truncate(tail + pct);
        }
        out.push('~');
        out.push_str(&hash);
    }
    Cow::Owned(out)
}

/// The name [`path_segment`] encoded (for a segment that was not cut to length).
pub fn decode_segment(segment: &str) -> Option<String> {
    if segment == "%" {
        return Some(String::new());
    }
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_names_are_unchanged() {
        for n in [
            "probe[context=ORT_QDQ_EMULATED,precision=a8_w8]",
            "count[k=1]",
            "k=a b,x=1.5",
            "optimize[precision=a16_w4]",
            "_",
            "naïve=ü",
        ] {
            assert!(matches!(path_segment(n), Cow::Borrowed(_)), "{n}");
        }
    }

    #[test]
    fn hazards_are_escaped_and_reversible() {
        let cases = [
            ("stage[k=../../etc]", "stage[k=..%2F..%2Fetc]"),
            ("a/b", "a%2Fb"),
            ("nul\0byte", "nul%00byte"),
            ("line\nbreak", "line%0Abreak"),
            ("-rf", "%2Drf"),
            ("..", "%2E%2E"),
            (".", "%2E"),
            ("", "%"),
            ("CON", "%43ON"),
            ("nul.txt", "%6Eul.txt"),
            ("com1", "%63om1"),
            ("trailing.", "trailing%2E"),
            ("trailing ", "trailing%20"),
            ("100%", "100%25"),
            ("C:\\x", "C%3A%5Cx"),
            ("a*b?c<d>e|f\"g", "a%2Ab%3Fc%3Cd%3Ee%7Cf%22g"),
        ];
        for (name, want) in cases {
            let got = path_segment(name);
            assert_eq!(got, want, "{name:?}");
            assert_eq!(decode_segment(&got).as_deref(), Some(name), "{name:?}");
            assert!(!got.contains('/') && !got.contains('\\') && got != ".." && got != ".");
        }
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_distinct() {
        let a = "x".repeat(300) + "a";
        let b = "x".repeat(300) + "b";
        let (sa, sb) = (path_segment(&a), path_segment(&b));
        assert!(sa.len() <= MAX_SEGMENT && sb.len() <= MAX_SEGMENT);
        assert_ne!(sa, sb);
        let slashes = "/".repeat(300);
        let s = path_segment(&slashes);
        assert!(s.len() <= MAX_SEGMENT && !s.contains('/'), "{s}");
    }
}

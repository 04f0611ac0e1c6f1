//! Secret values kept out of everything heddle writes about a command: its log files, the
//! lines shown while it runs, the error and facts it reports. Each occurrence of a value is
//! written as `***`, as CI systems mask their secrets.
//!
//! Output arrives in chunks, and a value may straddle two of them, so a [`MaskStream`] holds
//! back the last `longest - 1` bytes of each chunk until the next one shows whether they begin
//! a value. A stage without secrets pays nothing: [`Mask::stream`] of an empty mask passes
//! every chunk through untouched.

use std::borrow::Cow;
use std::fmt;

/// What a secret is written as.
pub const MASKED: &str = "***";

/// The values to hide. Its `Debug` shows how many, never what.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Mask {
    /// Longest first, so a value that contains a shorter one is hidden whole.
    values: Vec<Vec<u8>>,
}

impl fmt::Debug for Mask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mask({} values)", self.values.len())
    }
}

impl Mask {
    /// A mask of `values`; an empty value hides nothing and is dropped. A value with
    /// surrounding whitespace (a token read from a file keeps its newline) is hidden trimmed too.
    pub fn new<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Mask {
        let mut v: Vec<Vec<u8>> = Vec::new();
        for s in values {
            let s = s.as_ref();
            for form in [s, s.trim()] {
                if !form.is_empty() && !v.iter().any(|x| x == form.as_bytes()) {
                    v.push(form.as_bytes().to_vec());
                }
            }
        }
        v.sort_by_key(|x| std::cmp::Reverse(x.len()));
        Mask { values: v }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The length of the longest value (0 for none): how much of a chunk's end to carry over
    /// when searching a stream.
    pub fn longest(&self) -> usize {
        self.values.first().map_or(0, Vec::len)
    }

    /// The length of the value that starts `at`, if one does.
    fn match_at(&self, at: &[u8]) -> Option<usize> {
        self.values
            .iter()
            .find(|v| at.starts_with(v))
            .map(|v| v.len())
    }

    /// Whether `bytes` hold any value.
    pub fn found_in(&self, bytes: &[u8]) -> bool {
        !self.is_empty() && (0..bytes.len()).any(|i| self.match_at(&bytes[i..]).is_some())
    }

    /// `text` with every value written as [`MASKED`].
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.is_empty() || !self.found_in(text.as_bytes()) {
            return Cow::Borrowed(text);
        }
        let mut s = self.stream();
        let mut out = s.feed(text.as_bytes()).into_owned();
        out.extend(s.finish());
        // Values are whole UTF-8 strings, so replacing them keeps the text UTF-8.
        Cow::Owned(String::from_utf8_lossy(&out).into_owned())
    }

    /// A masker for one output stream.
    pub fn stream(&self) -> MaskStream {
        MaskStream {
            mask: self.clone(),
            held: Vec::new(),
        }
    }
}

/// One stream's masking, chunk by chunk.
pub struct MaskStream {
    mask: Mask,
    held: Vec<u8>,
}

impl MaskStream {
    /// The bytes of `chunk` (after what was held back) that are safe to write now.
    pub fn feed<'a>(&mut self, chunk: &'a [u8]) -> Cow<'a, [u8]> {
        if self.mask.is_empty() {
            return Cow::Borrowed(chunk);
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let longest = self.mask.values[0].len();
        let (out, rest) = self.scan(&data, data.len().saturating_sub(longest - 1));
        self.held = data[rest..].to_vec();
        Cow::Owned(out)
    }

    /// The bytes still held back, masked: the stream ended.
    pub fn finish(&mut self) -> Vec<u8> {
        let data = std::mem::take(&mut self.held);
        self.scan(&data, data.len()).0
    }

    /// Mask `data` up to `safe` (a value starting before it is whole in `data`); returns the
    /// output and where the unscanned rest starts.
    fn scan(&self, data: &[u8], safe: usize) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(data.len());
        let mut i = 0;
        while i < safe {
            match self.mask.match_at(&data[i..]) {
                Some(n) => {
                    out.extend_from_slice(MASKED.as_bytes());
                    i += n;
                }
                None => {
                    out.push(data[i]);
                    i += 1;
                }
            }
        }
        (out, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(mask: &Mask, chunks: &[&[u8]]) -> String {
        let mut s = mask.stream();
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&s.feed(c));
        }
        out.extend(s.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_are_masked_across_chunks() {
        let m = Mask::new(["s3cr3t", "", "tok\n"]);
        assert_eq!(through(&m, &[b"a s3cr3t b"]), "a *** b");
        assert_eq!(
            through(&m, &[b"a s3", b"cr", b"3t b s3cr3"]),
            "a *** b s3cr3"
        );
        assert_eq!(through(&m, &[b"tok tok\n"]), "*** ***");
        assert_eq!(through(&Mask::default(), &[b"s3cr3t"]), "s3cr3t");
        assert_eq!(m.apply("x=s3cr3t, y"), "x=***, y");
        assert!(matches!(m.apply("nothing"), Cow::Borrowed(_)));
        assert!(m.found_in(b"..s3cr3t.."));
        assert_eq!(format!("{m:?}"), "Mask(3 values)");
    }
}

//! Side-by-side comparison of a block as the entry has it and as a rerun regenerates it:
//! Markdown tables cell by cell (numbers within tolerance, text exactly), other lines token by
//! token. Every number gets a verdict with both values.

/// One compared value.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub ok: bool,
    /// Where: `row "3e-02" col "sign"` or `line 4 token 2`.
    pub place: String,
    pub entry: String,
    pub now: String,
}

#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// A number as tables print them: `95.8%`, `+0.993`, `75,134x`, `1.7700e-03`.
pub fn parse_number(s: &str) -> Option<f64> {
    let t = s.trim().trim_start_matches('+');
    let t = t
        .strip_suffix('%')
        .or_else(|| t.strip_suffix('x'))
        .unwrap_or(t);
    let t: String = t.chars().filter(|c| *c != ',').collect();
    if t.is_empty()
        || !t
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '.')
    {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn close(a: f64, b: f64, tol: Tolerance) -> bool {
    (a - b).abs() <= tol.atol + tol.rtol * b.abs().max(a.abs())
}

fn cells(line: &str) -> Option<Vec<String>> {
    let t = line.trim();
    if !t.starts_with('|') {
        return None;
    }
    Some(
        t.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect(),
    )
}

fn is_rule(cells: &[String]) -> bool {
    cells
        .iter()
        .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
}

/// Compare two block bodies. Returns every verdict (numbers and differing text).
pub fn compare_blocks(entry: &str, now: &str, tol: Tolerance) -> Vec<Verdict> {
    let mut out = Vec::new();
    let (el, nl): (Vec<&str>, Vec<&str>) = (entry.lines().collect(), now.lines().collect());
    let mut header: Vec<String> = Vec::new();
    let mut section = String::new();
    for i in 0..el.len().max(nl.len()) {
        let (a, b) = (
            el.get(i).copied().unwrap_or(""),
            nl.get(i).copied().unwrap_or(""),
        );
        if let Some(h) = a.trim().strip_prefix('#') {
            section = h.trim_start_matches('#').trim().to_string();
        }
        match (cells(a), cells(b)) {
            (Some(ca), Some(cb)) => {
                if is_rule(&ca) {
                    continue;
                }
                let numeric = ca.iter().skip(1).any(|c| parse_number(c).is_some());
                if !numeric && (header.is_empty() || ca.iter().all(|c| parse_number(c).is_none())) {
                    header = ca.clone();
                    if ca != cb {
                        out.push(Verdict {
                            ok: false,
                            place: format!("{section} header"),
                            entry: a.trim().into(),
                            now: b.trim().into(),
                        });
                    }
                    continue;
                }
                let row = ca.first().cloned().unwrap_or_default();
                for j in 0..ca.len().max(cb.len()) {
                    let (x, y) = (
                        ca.get(j).map(String::as_str).unwrap_or(""),
                        cb.get(j).map(String::as_str).unwrap_or(""),
                    );
                    let col = header.get(j).cloned().unwrap_or_else(|| format!("#{j}"));
                    let place = format!(
                        "{}row \"{row}\" col \"{col}\"",
                        if section.is_empty() {
                            String::new()
                        } else {
                            format!("{section}: ")
                        }
                    );
                    match (parse_number(x), parse_number(y)) {
                        (Some(p), Some(q)) if j > 0 || ca.len() == 1 => out.push(Verdict {
                            ok: close(p, q, tol),
                            place,
                            entry: x.into(),
                            now: y.into(),
                        }),
                        _ if x != y => out.push(Verdict {
                            ok: false,
                            place,
                            entry: x.into(),
                            now: y.into(),
                        }),
                        _ => {}
                    }
                }
            }
            _ => {
                header.clear();
                let (ta, tb): (Vec<&str>, Vec<&str>) = (
                    a.split_whitespace().collect(),
                    b.split_whitespace().collect(),
                );
                for k in 0..ta.len().max(tb.len()) {
                    let (x, y) = (
                        ta.get(k).copied().unwrap_or(""),
                        tb.get(k).copied().unwrap_or(""),
                    );
                    let place = format!("line {} word {}", i + 1, k + 1);
                    match (
                        parse_number(x.trim_end_matches([',', ';', '.', ')'])),
                        parse_number(y.trim_end_matches([',', ';', '.', ')'])),
                    ) {
                        (Some(p), Some(q)) => out.push(Verdict {
                            ok: close(p, q, tol),
                            place,
                            entry: x.into(),
                            now: y.into(),
                        }),
                        _ if x != y => out.push(Verdict {
                            ok: false,
                            place,
                            entry: x.into(),
                            now: y.into(),
                        }),
                        _ => {}
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Tolerance = Tolerance {
        rtol: 1e-6,
        atol: 0.0,
    };

    #[test]
    fn numbers_parse_like_tables_print_them() {
        assert_eq!(parse_number("95.8%"), Some(95.8));
        assert_eq!(parse_number("+0.993"), Some(0.993));
        assert_eq!(parse_number("75,134x"), Some(75134.0));
        assert_eq!(parse_number("1.7700e-03"), Some(0.00177));
        assert_eq!(parse_number("-0.258"), Some(-0.258));
        assert_eq!(parse_number("ORT_INTEGER"), None);
        assert_eq!(parse_number("a16_w16"), None);
    }

    #[test]
    fn an_edited_number_is_named_with_both_values() {
        let a =
            "## a16_w16\n| eps | sign | r |\n| --- | ---: | ---: |\n| 3e-02 | 95.8% | +0.993 |\n";
        let b =
            "## a16_w16\n| eps | sign | r |\n| --- | ---: | ---: |\n| 3e-02 | 95.8% | +0.990 |\n";
        let v = compare_blocks(a, b, T);
        let bad: Vec<_> = v.iter().filter(|v| !v.ok).collect();
        assert_eq!(bad.len(), 1, "{v:?}");
        assert_eq!(bad[0].place, "a16_w16: row \"3e-02\" col \"r\"");
        assert_eq!(
            (bad[0].entry.as_str(), bad[0].now.as_str()),
            ("+0.993", "+0.990")
        );
        assert_eq!(
            v.iter().filter(|v| v.ok).count(),
            1,
            "the row key is not a verdict"
        );
        let loose = compare_blocks(
            a,
            b,
            Tolerance {
                rtol: 0.01,
                atol: 0.0,
            },
        );
        assert!(loose.iter().all(|v| v.ok));
    }

    #[test]
    fn prose_numbers_and_words() {
        let v = compare_blocks(
            "start loss 1.7700e-03 in both\n",
            "start loss 1.7701e-03 in either\n",
            T,
        );
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|v| !v.ok));
    }
}

//! Side-by-side comparison of a block as the entry has it and as a rerun regenerates it:
//! Markdown tables cell by cell (numbers by a [`Rule`], text exactly), other lines token by
//! token. Every number gets a verdict with both values and what was allowed.
//!
//! The default rule is the entry's own precision: a printed number is reproduced when the rerun
//! agrees to the digits the entry printed, i.e. within half a unit in its last printed place
//! (`1.7700e-03` allows ±0.00005e-03, `95.8%` ±0.05, `75,134x` ±0.5). A fixed absolute
//! tolerance cannot do this job: an `atol` of 1e-3 let an edited start loss of 2.9000e-03 pass
//! against 2.0000e-03. An entry may state a looser tolerance instead (block attributes
//! `rtol=` / `atol=`), and so may the command line.
//!
//! A cell the entry writes as `?` holds no number: the entry did not record that value (e.g. a
//! published entry that printed only some of a table). Its verdict says so and is not a match.

/// One compared value.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub ok: bool,
    /// False when the entry's cell is `?`: there is nothing to reproduce, only a new value.
    pub recorded: bool,
    /// Where: `row "3e-02" col "sign"` or `line 4 word 2`.
    pub place: String,
    /// A table cell (`row … col …`), not a word of a line outside a table.
    pub cell: bool,
    pub entry: String,
    pub now: String,
    /// For numbers, the difference the rule allowed (`±0.00005e-03`, `rtol 0.01 atol 0`); `None`
    /// for text, which must match exactly.
    pub allowed: Option<String>,
}

/// A tolerance stated by the entry or on the command line: |a - b| <= atol + rtol * max(|a|, |b|).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// How a number is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// Agree to the digits the entry printed: within half a unit in its last printed place.
    Printed,
    /// Agree within a stated tolerance.
    Stated(Tolerance),
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Printed => write!(
                f,
                "to the digits the entry printed (half a unit in the last printed place)"
            ),
            Rule::Stated(t) => write!(f, "within rtol {} atol {}", t.rtol, t.atol),
        }
    }
}

/// The text a cell holds when the entry did not record a value there.
pub const NOT_RECORDED: &str = "?";

/// A number as tables print them: `95.8%`, `+0.993`, `75,134x`, `1.7700e-03`.
pub fn parse_number(s: &str) -> Option<f64> {
    let t = numeral(s)?;
    let t: String = t.chars().filter(|c| *c != ',').collect();
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// The numeral inside a printed number: sign `+`, unit `%` / `x` removed; `None` if it does not
/// start like a number.
fn numeral(s: &str) -> Option<&str> {
    let t = s.trim().trim_start_matches('+');
    let t = t
        .strip_suffix('%')
        .or_else(|| t.strip_suffix('x'))
        .unwrap_or(t);
    let first = t.chars().next()?;
    (first.is_ascii_digit() || first == '-' || first == '.').then_some(t)
}

/// Half a unit in the last printed place of a printed number, as a value and as text:
/// `1.7700e-03` → (5e-8, `±0.00005e-03`), `95.8%` → (0.05, `±0.05`), `75,134x` → (0.5, `±0.5`).
pub fn half_unit(s: &str) -> Option<(f64, String)> {
    parse_number(s)?;
    let t = numeral(s)?;
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let decimals = mantissa.split_once('.').map_or(0, |(_, f)| f.len());
    let exp: i32 = match exponent {
        Some(e) => e.trim_start_matches('+').parse().ok()?,
        None => 0,
    };
    let value = 5.0 * 10f64.powi(exp - decimals as i32 - 1);
    let text = format!(
        "±0.{}5{}",
        "0".repeat(decimals),
        exponent.map(|e| format!("e{e}")).unwrap_or_default()
    );
    Some((value, text))
}

/// Judge a rerun's number `now` against the entry's printed `entry`: (ok, what was allowed).
fn judge(entry: &str, p: f64, q: f64, rule: Rule) -> (bool, String) {
    match rule {
        Rule::Printed => {
            let (half, text) = half_unit(entry).unwrap_or((0.0, "exact".into()));
            // The relative slack absorbs binary rounding of the parsed decimals only.
            let ok = (p - q).abs() <= half * (1.0 + 1e-9) + 1e-12 * p.abs().max(q.abs());
            (ok, text)
        }
        Rule::Stated(t) => (
            (p - q).abs() <= t.atol + t.rtol * q.abs().max(p.abs()),
            format!("rtol {} atol {}", t.rtol, t.atol),
        ),
    }
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

/// One value of the entry against the rerun's: a number by the rule, `?` as not recorded,
/// anything else as text that must be equal. `None` when equal text (nothing to report).
fn verdict(place: String, cell: bool, x: &str, y: &str, rule: Rule) -> Option<Verdict> {
    let v = |ok, recorded, allowed| Verdict {
        ok,
        recorded,
        place,
        cell,
        entry: x.into(),
        now: y.into(),
        allowed,
    };
    let trim = |s: &str| s.trim_end_matches([',', ';', '.', ')', ':']).to_string();
    let (xn, yn) = (trim(x), trim(y));
    if xn == NOT_RECORDED {
        return Some(v(false, false, None));
    }
    match (parse_number(&xn), parse_number(&yn)) {
        (Some(p), Some(q)) => {
            let (ok, allowed) = judge(&xn, p, q, rule);
            Some(v(ok, true, Some(allowed)))
        }
        _ if x != y => Some(v(false, true, None)),
        _ => None,
    }
}

/// Compare two block bodies. Returns every verdict (numbers, unrecorded cells and differing text).
pub fn compare_blocks(entry: &str, now: &str, rule: Rule) -> Vec<Verdict> {
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
                let valued = |c: &String| parse_number(c).is_some() || c == NOT_RECORDED;
                let numeric = ca.iter().skip(1).any(valued);
                if !numeric && (header.is_empty() || !ca.iter().any(valued)) {
                    header = ca.clone();
                    if ca != cb {
                        out.push(Verdict {
                            ok: false,
                            recorded: true,
                            place: format!("{section} header"),
                            cell: false,
                            entry: a.trim().into(),
                            now: b.trim().into(),
                            allowed: None,
                        });
                    }
                    continue;
                }
                // The leading columns that hold no value name the row (the first always does):
                // rows keyed by (precision, context) stay apart.
                let leading = ca.iter().take_while(|c| !valued(c)).count();
                let labels = leading.clamp(1, ca.len().saturating_sub(1).max(1));
                let row = ca[..labels.min(ca.len())].join(", ");
                for j in 0..ca.len().max(cb.len()) {
                    let (x, y) = (
                        ca.get(j).map(String::as_str).unwrap_or(""),
                        cb.get(j).map(String::as_str).unwrap_or(""),
                    );
                    // The label columns name the row; they are compared as text.
                    if j < labels && ca.len() > 1 {
                        if x != y {
                            out.push(Verdict {
                                ok: false,
                                recorded: true,
                                place: format!("{}row \"{row}\" key", prefix(&section)),
                                cell: true,
                                entry: x.into(),
                                now: y.into(),
                                allowed: None,
                            });
                        }
                        continue;
                    }
                    let col = header.get(j).cloned().unwrap_or_else(|| format!("#{j}"));
                    let place = format!("{}row \"{row}\" col \"{col}\"", prefix(&section));
                    out.extend(verdict(place, true, x, y, rule));
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
                    out.extend(verdict(
                        format!("line {} word {}", i + 1, k + 1),
                        false,
                        x,
                        y,
                        rule,
                    ));
                }
            }
        }
    }
    out
}

fn prefix(section: &str) -> String {
    if section.is_empty() {
        String::new()
    } else {
        format!("{section}: ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Rule = Rule::Stated(Tolerance {
        rtol: 1e-6,
        atol: 0.0,
    });

    #[test]
    fn numbers_parse_like_tables_print_them() {
        assert_eq!(parse_number("95.8%"), Some(95.8));
        assert_eq!(parse_number("+0.993"), Some(0.993));
        assert_eq!(parse_number("75,134x"), Some(75134.0));
        assert_eq!(parse_number("1.7700e-03"), Some(0.00177));
        assert_eq!(parse_number("-0.258"), Some(-0.258));
        assert_eq!(parse_number("ORT_INTEGER"), None);
        assert_eq!(parse_number("a16_w16"), None);
        assert_eq!(parse_number("?"), None);
    }

    #[test]
    fn half_a_unit_in_the_last_printed_place() {
        let h = |s| half_unit(s).map(|(v, t)| (format!("{v:e}"), t));
        assert_eq!(
            h("1.7700e-03"),
            Some(("5e-8".into(), "±0.00005e-03".into()))
        );
        assert_eq!(h("12.3"), Some(("5e-2".into(), "±0.05".into())));
        assert_eq!(h("95.8%"), Some(("5e-2".into(), "±0.05".into())));
        assert_eq!(h("+0.993"), Some(("5e-4".into(), "±0.0005".into())));
        assert_eq!(h("75,134x"), Some(("5e-1".into(), "±0.5".into())));
        assert_eq!(h("3e-02"), Some(("5e-3".into(), "±0.5e-02".into())));
        assert_eq!(h("4.2E+01"), Some(("5e-1".into(), "±0.05e+01".into())));
        assert_eq!(h("FAILED"), None);
    }

    fn judged(entry: &str, now: &str) -> bool {
        let v = compare_blocks(entry, now, Rule::Printed);
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].ok
    }

    #[test]
    fn the_printed_rule_accepts_the_printed_digits_and_nothing_more() {
        assert!(judged("loss 1.7700e-03\n", "loss 1.7700e-03\n"));
        assert!(judged("loss 1.7700e-03\n", "loss 1.77004e-03\n"));
        assert!(judged("loss 1.7700e-03\n", "loss 1.77e-03\n"));
        assert!(!judged("loss 1.7700e-03\n", "loss 1.7701e-03\n"));
        assert!(!judged("loss 1.7700e-03\n", "loss 1.77006e-03\n"));
        // The case a fixed atol of 1e-3 let through (+45 %).
        assert!(!judged("loss 2.9000e-03\n", "loss 2.0000e-03\n"));
        assert!(judged("x 12.3 y\n", "x 12.34 y\n"));
        assert!(!judged("x 12.3 y\n", "x 12.36 y\n"));
        // A rerun printed to fewer digits cannot confirm the entry's.
        assert!(!judged("loss 1.7712e-03\n", "loss 1.77e-03\n"));
    }

    #[test]
    fn an_edited_number_is_named_with_both_values_and_the_allowance() {
        let a =
            "## a16_w16\n| eps | sign | r |\n| --- | ---: | ---: |\n| 3e-02 | 95.8% | +0.993 |\n";
        let b =
            "## a16_w16\n| eps | sign | r |\n| --- | ---: | ---: |\n| 3e-02 | 95.8% | +0.990 |\n";
        let v = compare_blocks(a, b, Rule::Printed);
        let bad: Vec<_> = v.iter().filter(|v| !v.ok).collect();
        assert_eq!(bad.len(), 1, "{v:?}");
        assert_eq!(bad[0].place, "a16_w16: row \"3e-02\" col \"r\"");
        assert_eq!(
            (
                bad[0].entry.as_str(),
                bad[0].now.as_str(),
                bad[0].allowed.as_deref()
            ),
            ("+0.993", "+0.990", Some("±0.0005"))
        );
        assert_eq!(
            v.iter().filter(|v| v.ok).count(),
            1,
            "the row key is not a verdict"
        );
        let loose = compare_blocks(
            a,
            b,
            Rule::Stated(Tolerance {
                rtol: 0.01,
                atol: 0.0,
            }),
        );
        assert!(loose.iter().all(|v| v.ok));
        assert_eq!(loose[1].allowed.as_deref(), Some("rtol 0.01 atol 0"));
    }

    #[test]
    fn a_changed_row_key_is_a_difference() {
        let a = "| eps | r |\n| --- | --- |\n| 3e-02 | 0.5 |\n";
        let b = "| eps | r |\n| --- | --- |\n| 1e-02 | 0.5 |\n";
        let v = compare_blocks(a, b, Rule::Printed);
        assert_eq!(v.iter().filter(|v| !v.ok).count(), 1, "{v:?}");
        assert_eq!(v[0].place, "row \"3e-02\" key");
    }

    #[test]
    fn an_unrecorded_cell_is_neither_a_match_nor_a_difference() {
        let a = "| context | start loss | max abs diff |\n| --- | --- | --- |\n| Q | 1.7700e-03 | ? |\n";
        let b = "| context | start loss | max abs diff |\n| --- | --- | --- |\n| Q | 1.7700e-03 | 3.1e-05 |\n";
        let v = compare_blocks(a, b, Rule::Printed);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].ok && v[0].recorded);
        assert!(!v[1].ok && !v[1].recorded);
        assert_eq!(v[1].now, "3.1e-05");
    }

    #[test]
    fn leading_label_columns_all_name_the_row() {
        let entry = "| precision | context | top-1 |\n|---|---|---|\n| a8_w8 | short | 0.5 |\n| a8_w8 | long | 0.25 |\n";
        let now = "| precision | context | top-1 |\n|---|---|---|\n| a8_w8 | short | 0.75 |\n| a8_w8 | long | 0.5 |\n";
        let places: Vec<String> = compare_blocks(entry, now, Rule::Printed)
            .into_iter()
            .map(|v| v.place)
            .collect();
        assert_eq!(
            places,
            [
                "row \"a8_w8, short\" col \"top-1\"",
                "row \"a8_w8, long\" col \"top-1\""
            ]
        );
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

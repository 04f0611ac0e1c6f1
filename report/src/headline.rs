//! A run's headline number, the one figure `heddle runs` prints beside each run: the first number
//! in a table cell of the run's report tables, taken in plan order (the first `report = true`
//! stage's first `.md` output, else the next table that holds a number). A report stage that puts
//! its key result first in its first table, as a results table does, gets that result; numbers in
//! prose and headings are skipped, since `(seed 0)` is no result.
//!
//! The cells are read by the logbook's own table reader ([`compare_blocks`] of a table against
//! itself, which yields every number with its place), so a headline is the same number that
//! `heddle diff` and `heddle logbook verify` see at that place.

use serde::Serialize;

use crate::compare::{compare_blocks, Rule};
use crate::entry::Table;

/// The first number of a run's report tables and where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Headline {
    /// The table, `label#output`.
    pub src: String,
    /// Its cell, as `heddle diff` names it: `a16_w16: row "3e-02" col "sign"`.
    pub place: String,
    /// The number as the table printed it (`93.8%`, `+0.997`, `1.7700e-03`).
    pub value: String,
}

/// The headline of a run whose report tables are `tables` (`crate::artefacts::tables`), or
/// `None` when no table cell holds a number.
pub fn headline(tables: &[Table]) -> Option<Headline> {
    tables.iter().find_map(|t| {
        compare_blocks(&t.markdown, &t.markdown, Rule::Printed)
            .into_iter()
            .find(|v| v.cell && v.allowed.is_some())
            .map(|v| Headline {
                src: t.src.clone(),
                place: v.place,
                value: v.entry,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(src: &str, markdown: &str) -> Table {
        Table {
            src: src.into(),
            digest: String::new(),
            markdown: markdown.into(),
        }
    }

    #[test]
    fn the_first_number_in_a_cell_not_in_prose() {
        let md = "# probe (seed 0)\n\nsign: agreement at eps 3e-02.\n\n## a16_w16\n\n| eps | sign | r |\n| --- | ---: | ---: |\n| 3e-02 | 100.0% | +1.000 |\n| 1e-02 | ? | +0.9 |\n";
        assert_eq!(
            headline(&[table("compare#table", md)]),
            Some(Headline {
                src: "compare#table".into(),
                place: "a16_w16: row \"3e-02\" col \"sign\"".into(),
                value: "100.0%".into(),
            })
        );
    }

    #[test]
    fn a_table_without_numbers_passes_to_the_next() {
        let words = "| k | v |\n| --- | --- |\n| a | FAILED |\n";
        let nums = "| k | v |\n| --- | ---: |\n| a | 2.5 |\n";
        let h = headline(&[table("a#t", words), table("b#t", nums)]).unwrap();
        assert_eq!((h.src.as_str(), h.value.as_str()), ("b#t", "2.5"));
        assert_eq!(headline(&[table("a#t", words)]), None);
        assert_eq!(headline(&[]), None);
    }
}

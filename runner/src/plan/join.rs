//! The matrix join: a stage's matrix assignments joined with a mapped upstream's instances on
//! their shared keys, through a hash index instead of a scan of every upstream instance per
//! assignment (which made planning quadratic; benches/RESULTS.md, M5).
//!
//! The result, and its order, are those of the nested loop it replaces (kept in the tests as
//! the reference): for each assignment in order, each upstream candidate in order whose values
//! agree on the shared keys, the assignment extended with the candidate's keys, duplicates
//! dropped keeping the first.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use super::Matrix;

/// Upstream instances bucketed by their values on a fixed list of keys.
pub(crate) struct ProjectionIndex {
    keys: Vec<String>,
    buckets: HashMap<u64, Vec<usize>>,
}

fn projection_hash<'a>(
    keys: &[String],
    get: impl Fn(&str) -> Option<&'a serde_json::Value>,
) -> u64 {
    let mut h = DefaultHasher::new();
    for k in keys {
        get(k).hash(&mut h);
    }
    h.finish()
}

fn same_projection(keys: &[String], a: &Matrix, b: &Matrix) -> bool {
    keys.iter().all(|k| a.get(k) == b.get(k))
}

impl ProjectionIndex {
    /// Index `cands` (kept in their order within a bucket) by their values on `keys`.
    pub(crate) fn new<'m>(
        keys: Vec<String>,
        cands: impl IntoIterator<Item = usize>,
        matrix_of: impl Fn(usize) -> &'m Matrix,
    ) -> ProjectionIndex {
        let mut buckets: HashMap<u64, Vec<usize>> = HashMap::new();
        for u in cands {
            let m = matrix_of(u);
            buckets
                .entry(projection_hash(&keys, |k| m.get(k)))
                .or_default()
                .push(u);
        }
        ProjectionIndex { keys, buckets }
    }

    /// The candidates, in their order, whose values on the index keys equal `m`'s (a key absent
    /// from both counts as equal, as in a plain `get` comparison).
    pub(crate) fn matches<'s, 'm>(
        &'s self,
        m: &'s Matrix,
        matrix_of: impl Fn(usize) -> &'m Matrix + 's,
    ) -> impl Iterator<Item = usize> + 's
    where
        'm: 's,
    {
        let bucket = self
            .buckets
            .get(&projection_hash(&self.keys, |k| m.get(k)))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        bucket
            .iter()
            .copied()
            .filter(move |&u| same_projection(&self.keys, matrix_of(u), m))
    }
}

/// Join `assigns` with the candidates `cands` of one mapped upstream that contributes the keys
/// `ukeys`: an assignment pairs with a candidate when they agree on every key of `ukeys` the
/// assignment has.
///
/// Every assignment has the same keys (the cartesian product of the stage's own matrix,
/// extended by earlier joins with the same keys each time), and the assignments are distinct, so
/// two different assignments never extend to the same result; only candidates with equal values
/// on `ukeys` can duplicate a result, and those are dropped once, up front.
pub(crate) fn join<'m>(
    assigns: &[Matrix],
    cands: &[usize],
    ukeys: &BTreeSet<String>,
    matrix_of: impl Fn(usize) -> &'m Matrix + Copy,
) -> Vec<Matrix> {
    let ukeys: Vec<String> = ukeys.iter().cloned().collect();
    // First candidate of each distinct projection on `ukeys`, in order.
    let mut distinct = Vec::with_capacity(cands.len());
    let mut seen: HashMap<u64, Vec<usize>> = HashMap::new();
    for &u in cands {
        let um = matrix_of(u);
        let firsts = seen
            .entry(projection_hash(&ukeys, |k| um.get(k)))
            .or_default();
        if !firsts
            .iter()
            .any(|&f| same_projection(&ukeys, matrix_of(f), um))
        {
            firsts.push(u);
            distinct.push(u);
        }
    }
    drop(seen);
    // Indexes by the keys an assignment shares with the candidates; one in practice.
    let mut indexes: Vec<ProjectionIndex> = Vec::new();
    let mut next = Vec::new();
    for a in assigns {
        let shared: Vec<String> = ukeys
            .iter()
            .filter(|k| a.contains_key(*k))
            .cloned()
            .collect();
        let at = match indexes.iter().position(|ix| ix.keys == shared) {
            Some(at) => at,
            None => {
                indexes.push(ProjectionIndex::new(
                    shared,
                    distinct.iter().copied(),
                    matrix_of,
                ));
                indexes.len() - 1
            }
        };
        for u in indexes[at].matches(a, matrix_of) {
            let um = matrix_of(u);
            let mut m = a.clone();
            for k in &ukeys {
                m.insert(k.clone(), um[k].clone());
            }
            next.push(m);
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The nested loop `plan::build` used before the index: the reference result.
    fn scan(
        assigns: &[Matrix],
        cands: &[usize],
        ukeys: &BTreeSet<String>,
        ms: &[Matrix],
    ) -> Vec<Matrix> {
        let mut next = Vec::new();
        for a in assigns {
            for &u in cands {
                let um = &ms[u];
                if ukeys
                    .iter()
                    .all(|k| a.get(k).is_none_or(|v| Some(v) == um.get(k)))
                {
                    let mut m = a.clone();
                    for k in ukeys {
                        m.insert(k.clone(), um[k].clone());
                    }
                    if !next.contains(&m) {
                        next.push(m);
                    }
                }
            }
        }
        next
    }

    fn product(keys: &[(&str, Vec<Value>)]) -> Vec<Matrix> {
        let mut out = vec![Matrix::new()];
        for (k, vals) in keys {
            out = out
                .into_iter()
                .flat_map(|a| {
                    vals.iter().map(move |v| {
                        let mut a = a.clone();
                        a.insert(k.to_string(), v.clone());
                        a
                    })
                })
                .collect();
        }
        out
    }

    fn keys(k: &[&str]) -> BTreeSet<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    fn check(assigns: Vec<Matrix>, ups: Vec<Matrix>, cands: Vec<usize>, ukeys: BTreeSet<String>) {
        let want = scan(&assigns, &cands, &ukeys, &ups);
        let got = join(&assigns, &cands, &ukeys, |u| &ups[u]);
        assert_eq!(
            got, want,
            "assigns {assigns:?} cands {cands:?} ukeys {ukeys:?}"
        );
    }

    fn m(pairs: &[(&str, Value)]) -> Matrix {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    /// The result spelt out, not only compared with the reference loop.
    #[test]
    fn a_join_extends_each_assignment_with_its_partners_in_order() {
        let ups = [
            m(&[("i", json!(1)), ("p", json!("a8"))]),
            m(&[("i", json!(2)), ("p", json!("a8"))]),
            m(&[("i", json!(1)), ("p", json!("a16"))]),
        ];
        let own = vec![m(&[("i", json!(1))]), m(&[("i", json!(3))])];
        let got = join(&own, &[0, 1, 2], &keys(&["i", "p"]), |u| &ups[u]);
        assert_eq!(
            got,
            vec![
                m(&[("i", json!(1)), ("p", json!("a8"))]),
                m(&[("i", json!(1)), ("p", json!("a16"))]),
            ]
        );
        // Joined on `i` only, the two `i = 1` candidates give one result, the first's.
        let got = join(&[Matrix::new()], &[2, 0, 1], &keys(&["i"]), |u| &ups[u]);
        assert_eq!(got, vec![m(&[("i", json!(1))]), m(&[("i", json!(2))])]);
    }

    #[test]
    fn values_of_different_types_do_not_join() {
        let ups = [m(&[("i", json!("1"))]), m(&[("i", json!(1.0))])];
        let own = vec![m(&[("i", json!(1))])];
        assert!(join(&own, &[0, 1], &keys(&["i"]), |u| &ups[u]).is_empty());
    }

    #[test]
    fn a_map_pairs_each_instance_with_its_upstream() {
        // `d` with no matrix of its own maps `m[i]`: one instance per upstream instance.
        let ups = product(&[("i", (0..50).map(|i| json!(i)).collect())]);
        let cands: Vec<usize> = (0..ups.len()).collect();
        check(
            vec![Matrix::new()],
            ups.clone(),
            cands.clone(),
            keys(&["i"]),
        );
        // Its own matrix on another key: the cartesian product.
        let own = product(&[("j", vec![json!("a"), json!("b")])]);
        check(own, ups.clone(), cands.clone(), keys(&["i"]));
        // Its own matrix on the same key, with values the upstream lacks: the intersection.
        let own = product(&[("i", vec![json!(3), json!(99), json!(7), json!("3")])]);
        check(own, ups, cands, keys(&["i"]));
    }

    #[test]
    fn multi_key_joins_match_on_every_shared_key() {
        let ups = product(&[
            ("i", (0..6).map(|i| json!(i)).collect()),
            ("k", vec![json!(true), json!(false)]),
            ("p", vec![json!("a16"), json!("a8"), json!(1.5)]),
        ]);
        let cands: Vec<usize> = (0..ups.len()).collect();
        let own = product(&[("k", vec![json!(false)]), ("i", vec![json!(5), json!(2)])]);
        check(
            own.clone(),
            ups.clone(),
            cands.clone(),
            keys(&["i", "k", "p"]),
        );
        // Candidates in a shuffled order keep that order within each assignment.
        let mut shuffled = cands.clone();
        shuffled.reverse();
        shuffled.rotate_left(7);
        check(own, ups.clone(), shuffled, keys(&["i", "k", "p"]));
        // A second mapped input, chained after the first (as `plan::build` does).
        let first = join(&[Matrix::new()], &cands, &keys(&["i", "k", "p"]), |u| {
            &ups[u]
        });
        let other = product(&[("k", vec![json!(true)]), ("q", vec![json!(0), json!(1)])]);
        let ocands: Vec<usize> = (0..other.len()).collect();
        check(first, other, ocands, keys(&["k", "q"]));
    }

    #[test]
    fn a_pick_joins_on_the_keys_it_did_not_fix() {
        // `m[j=1].o` from m[i, j]: candidates are the j=1 instances, joined on `i` only, so
        // instances that differ only in the picked key would duplicate without the dedupe.
        let ups = product(&[
            ("i", (0..8).map(|i| json!(i)).collect()),
            ("j", vec![json!(0), json!(1), json!("1")]),
        ]);
        let picked: Vec<usize> = (0..ups.len())
            .filter(|&u| crate::model::value_text(&ups[u]["j"]) == "1")
            .collect();
        assert_eq!(picked.len(), 16, "1 and \"1\" both match the pick");
        check(
            vec![Matrix::new()],
            ups.clone(),
            picked.clone(),
            keys(&["i"]),
        );
        let own = product(&[("i", vec![json!(4), json!(0)]), ("z", vec![json!(1)])]);
        check(own, ups, picked, keys(&["i"]));
    }

    #[test]
    fn a_gather_like_join_without_keys_and_empty_sides() {
        // No keys contributed (an unmatrixed upstream): every assignment pairs with it once.
        let ups = vec![Matrix::new(), Matrix::new()];
        let own = product(&[("i", vec![json!(1), json!(2)])]);
        check(own.clone(), ups.clone(), vec![0, 1], keys(&[]));
        check(own.clone(), ups, vec![], keys(&[]));
        check(vec![], vec![Matrix::new()], vec![0], keys(&[]));
        // Nothing in common: no instances.
        let ups = product(&[("i", vec![json!(3)])]);
        check(own, ups, vec![0], keys(&["i"]));
    }

    #[test]
    fn the_partner_index_finds_the_first_candidate_with_equal_values() {
        let ups = product(&[
            ("i", (0..100).map(|i| json!(i)).collect()),
            ("j", vec![json!(0), json!(1)]),
        ]);
        let cands: Vec<usize> = (0..ups.len()).collect();
        let ix = ProjectionIndex::new(vec!["i".into(), "j".into()], cands.iter().copied(), |u| {
            &ups[u]
        });
        for (u, m) in ups.iter().enumerate() {
            let mut want = m.clone();
            want.insert("extra".into(), json!("x"));
            assert_eq!(ix.matches(&want, |u| &ups[u]).next(), Some(u));
        }
        let absent: Matrix = [("i".to_string(), json!(100)), ("j".to_string(), json!(0))]
            .into_iter()
            .collect();
        assert_eq!(ix.matches(&absent, |u| &ups[u]).next(), None);
    }
}

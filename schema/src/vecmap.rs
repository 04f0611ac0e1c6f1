//! A small sorted map for the per-instance maps of a plan and of a run record (matrix values,
//! inputs, outputs and where they went).
//!
//! A `BTreeMap` allocates a whole node (11 slots, ~630 bytes for `String → Value`) however few
//! entries it holds. A plan holds two such maps per instance (a million-instance matrix spent
//! ~1.5 GB on them) and a run record four more (2.6 KB per instance, most of it empty slots,
//! which a no-op run of a 100,000-value matrix paid for in page faults). These maps have a
//! handful of entries, so a sorted `Vec` is as fast to search and costs only its entries.
//! Iteration is in key order, like a `BTreeMap`, and it reads and writes the same JSON map.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ops::Index;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VecMap<V> {
    /// Sorted by key, keys unique.
    entries: Vec<(String, V)>,
}

impl<V> Default for VecMap<V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<V> VecMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    fn find<Q>(&self, k: &Q) -> Result<usize, usize>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries
            .binary_search_by(|(key, _)| Borrow::<Q>::borrow(key).cmp(k))
    }

    pub fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(k).ok().map(|i| &self.entries[i].1)
    }

    pub fn contains_key<Q>(&self, k: &Q) -> bool
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(k).is_ok()
    }

    /// Insert or replace; returns the value replaced.
    pub fn insert(&mut self, k: String, v: V) -> Option<V> {
        match self.find(k.as_str()) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, v)),
            Err(i) => {
                grow_for_one(&mut self.entries);
                self.entries.insert(i, (k, v));
                None
            }
        }
    }

    pub fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(k).ok().map(|i| &mut self.entries[i].1)
    }

    pub fn remove<Q>(&mut self, k: &Q) -> Option<V>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(k).ok().map(|i| self.entries.remove(i).1)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &V)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<V: Clone> VecMap<V> {
    /// The same entries as a `BTreeMap` (for records and keys, whose types are fixed).
    pub fn to_btree(&self) -> BTreeMap<String, V> {
        self.entries.iter().cloned().collect()
    }
}

impl<V, Q> Index<&Q> for VecMap<V>
where
    String: Borrow<Q>,
    Q: Ord + ?Sized,
{
    type Output = V;
    fn index(&self, k: &Q) -> &V {
        self.get(k).expect("key present in VecMap")
    }
}

impl<'a, V> IntoIterator for &'a VecMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, V)>,
        fn(&'a (String, V)) -> (&'a String, &'a V),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl<V> IntoIterator for VecMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<V> Extend<(String, V)> for VecMap<V> {
    fn extend<I: IntoIterator<Item = (String, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<V> FromIterator<(String, V)> for VecMap<V> {
    /// Like a `BTreeMap`'s: a repeated key keeps its last value.
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        // Collected whole (an exact-size iterator, as most are here, gives an exact capacity),
        // then sorted: inserting one by one would grow the vector to 4 slots for one entry.
        let mut entries: Vec<(String, V)> = iter.into_iter().collect();
        // Stable: of equal keys, the last one collected stays last, and is the one kept.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: usize = 0;
        for i in 0..entries.len() {
            if kept > 0 && entries[kept - 1].0 == entries[i].0 {
                entries.swap(kept - 1, i);
            } else {
                entries.swap(kept, i);
                kept += 1;
            }
        }
        entries.truncate(kept);
        VecMap { entries }
    }
}

/// Room for one more entry. These maps hold a handful of entries and there is one per
/// instance, a million of them in a large plan: a first insert into an empty `Vec` reserves 4
/// slots, three of them wasted when, as usually, one entry is all there is. Small maps grow by
/// one; larger ones as a `Vec` does.
fn grow_for_one<T>(entries: &mut Vec<T>) {
    if entries.len() == entries.capacity() && entries.len() < 4 {
        entries.reserve_exact(1);
    }
}

impl<V> From<BTreeMap<String, V>> for VecMap<V> {
    fn from(b: BTreeMap<String, V>) -> Self {
        // Already sorted and unique.
        VecMap {
            entries: b.into_iter().collect(),
        }
    }
}

impl<V, const N: usize> From<[(String, V); N]> for VecMap<V> {
    fn from(pairs: [(String, V); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl<V: Serialize> Serialize for VecMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Like a `BTreeMap`'s: a repeated key keeps its last value.
impl<'de, V: Deserialize<'de>> Deserialize<'de> for VecMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = VecMap<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<VecMap<V>, A::Error> {
                let mut entries: Vec<(String, V)> =
                    Vec::with_capacity(access.size_hint().unwrap_or(0).min(64));
                while let Some((k, v)) = access.next_entry()? {
                    entries.push((k, v));
                }
                // Usually written sorted and unique (heddle writes them so): then this is one pass.
                if entries.windows(2).all(|w| w[0].0 < w[1].0) {
                    return Ok(VecMap { entries });
                }
                Ok(entries.into_iter().collect())
            }
        }
        d.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn behaves_like_a_btreemap() {
        let pairs = [
            ("p", json!(1)),
            ("c", json!("x")),
            ("k", json!(true)),
            ("c", json!(2)),
        ];
        let mut b = BTreeMap::new();
        let mut v = VecMap::new();
        for (k, val) in pairs {
            assert_eq!(
                v.insert(k.to_string(), val.clone()),
                b.insert(k.to_string(), val)
            );
        }
        assert!(v.iter().eq(b.iter()));
        assert_eq!(v.len(), 3);
        assert_eq!(v.get("c"), Some(&json!(2)));
        assert_eq!(v["k"], json!(true));
        assert!(!v.contains_key("z") && v.get("z").is_none());
        assert_eq!(v.to_btree(), b);
        assert_eq!(VecMap::from(b.clone()), v);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let collected: VecMap<Value> = b.clone().into_iter().rev().collect();
        assert_eq!(collected, v);
        assert_eq!(v.clone().into_iter().collect::<BTreeMap<_, _>>(), b);
    }

    #[test]
    fn collects_like_a_btreemap_and_holds_only_its_entries() {
        let pairs = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5), ("b", 6)];
        let owned = || pairs.iter().map(|(k, v)| (k.to_string(), *v));
        let v: VecMap<i32> = owned().collect();
        let b: BTreeMap<String, i32> = owned().collect();
        assert!(v.iter().eq(b.iter()), "{v:?} against {b:?}");
        // One entry, one slot: a plan and a record hold several such maps per instance.
        let one: VecMap<i32> = [("x".to_string(), 1)].into();
        assert_eq!(one.entries.capacity(), 1);
        let mut grown = VecMap::new();
        grown.insert("b".to_string(), 1);
        assert_eq!(grown.entries.capacity(), 1);
        grown.insert("a".to_string(), 2);
        assert_eq!(grown.entries.capacity(), 2);
        assert_eq!(grown.keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn reads_the_json_a_btreemap_reads() {
        for text in [
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"b":2}"#,
            r#"{"a":1,"a":3}"#,
            "{}",
        ] {
            let v: VecMap<Value> = serde_json::from_str(text).unwrap();
            let b: BTreeMap<String, Value> = serde_json::from_str(text).unwrap();
            assert_eq!(v.to_btree(), b, "{text}");
        }
        assert!(serde_json::from_str::<VecMap<Value>>("[1]").is_err());
    }
}

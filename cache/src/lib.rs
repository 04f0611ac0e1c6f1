//! heddle-cache owns bytes and keys: the [`Digest`] type and [`hash_file`], the local
//! content-addressed store of blobs and directory trees ([`Store`]), the action cache that maps
//! an action key to the outputs it produced ([`ActionEntry`]), per-key locks for single flight
//! across processes ([`KeyLock`]), the [`StatCache`] that avoids re-hashing unchanged files, and
//! the maintenance passes `verify`, `du` and `gc`. It knows nothing of pipelines, stages or
//! templates: a key and a family are opaque to it.
//!
//! # Layout
//!
//! ```text
//! <root>/objects/ab/<hex>        blobs: file contents and tree manifests, read-only
//! <root>/actions/ab/<hex>.json   action entries
//! <root>/families/<id>.keys      append-only index: every key ever recorded per family
//! <root>/locks/<hex>.lock        per-key locks (holder pid inside); store.lock (presence)
//! <root>/tmp/                    temp files, renamed into place when complete
//! <root>/imports/<boot>-*.unsynced  digests of imported blobs not fsynced (locked by their store)
//! <root>/quarantine/             blobs found not to match their name: `verify` reports, `gc` removes
//! <root>/scratch/run-*/          a run's sandboxes, locked while the run lives (scratch.rs)
//! ```
//!
//! # Crash safety
//!
//! Every object and entry is written to `tmp/` under a drop guard and renamed into place, so a
//! reader sees a whole file or none. An action entry is renamed into place only after the blobs
//! it references are durable ([`Durability::GroupCommit`]: `put_output` writes without fsync and
//! `record_action` makes the whole batch plus the entry's temp file durable before renaming
//! the entry into place). A process killed at any moment leaves at
//! most temp files, which `verify` removes; a torn or unparsable entry or a missing blob reads
//! as a miss, never a panic.
//!
//! A blob imported from a remote cache is the exception to "durable before its entry" on
//! Linux: it was verified as it streamed in and the remote holds it durably, so instead of an
//! fsync of its bytes (seconds for a GiB) its digest is made durable in the store's imports
//! journal before it is renamed into place (concurrent imports share the journal's
//! `fdatasync`). The first [`Store::open`] after a reboot re-hashes the blobs the journals of
//! that earlier boot list (once; benches/RESULTS.md, M9) and quarantines any torn by the power
//! loss, so the entries naming them read as misses (`store/imports_journal.rs`). The entry of
//! a remote hit is then recorded without an fsync ([`Store::record_fetched_action`]): lost to a
//! power loss, it is a miss that the remote serves again.
//!
//! ## Why a group commit
//!
//! On the development machine (ext4 on a virtual disk, shared and busy) a durable
//! `record_action` per stage (fsync of the blob, of the entry, of the shard folder) cost more
//! than the whole per-stage budget (benches/RESULTS.md, M10). Writing
//! blobs unsynced and making one batch durable per commit keeps the ordering guarantee (no entry
//! is visible before its blobs are durable) while [`Store::record_actions`] amortises the fsyncs
//! over many stages: recorded 50 at a time, stages cost the same as with
//! [`Durability::None`]. `syncfs` is used only for very large batches: it also flushes every
//! other dirty file on the filesystem (container layers, build trees), which can take seconds.
//! Run `cargo run --release -p heddle-cache --example store_bench` to measure.
//!
//! # A materialised output cannot corrupt the store
//!
//! Files are materialised by reflink where the filesystem supports it (a separate inode), by
//! plain copy when small (≤ 64 KiB), and by hard link only for large non-executable files on
//! filesystems without reflink. A hard link shares the blob's inode, and as root the read-only
//! mode does not stop an in-place write. So every blob gets a sentinel mtime
//! (2000-01-01T00:00:00Z) when it enters the store: a write through any link moves the mtime to
//! "now", while link, unlink and chmod leave it alone. Before a blob is served (materialise, or
//! checking a hit in `lookup_action`) its mtime and size are compared (one stat); a blob whose
//! stat moved is re-hashed, and if it no longer matches its digest it is moved to
//! `quarantine/` (integrity.rs) and the caller sees a miss (`lookup_action`) or
//! [`CacheError::CorruptBlob`] (`materialize`), so the action reruns. The sentinel is a
//! per-blob record that needs no side file and survives any number of processes; its cost is
//! that hard-linked outputs show that old mtime.
//!
//! [`StatCache`] records compare (dev, inode, size, mtime, ctime), except that a file carrying
//! the sentinel mtime (a hard link to a blob) is not invalidated by a ctime change alone:
//! linking the blob elsewhere moves the shared inode's ctime, a write moves its mtime.
//!
//! The same care applies on the way in: `put_output` hard-links a large produced file into the
//! store only when it has a single link (a produced file that is a link to some user file is
//! copied, so the user's file never becomes a read-only blob).

pub mod beneath;
mod digest;
mod entry;
mod error;
mod fsutil;
mod integrity;
mod lock;
mod maintenance;
mod maintenance_report;
mod remove_tree;
pub mod scratch;
mod statcache;
mod store;
mod tree;

pub use digest::{hash_file, Digest};
pub use entry::{ActionEntry, OutputEntry};
pub use error::{causes, error_chain, CacheError};
pub use lock::KeyLock;
pub use maintenance_report::{BadEntry, DuReport, FamilyUsage, GcReport, VerifyReport};
pub use statcache::StatCache;
pub use store::{BlobImport, Durability, ImportOutcome, Store, StoreOptions};
pub use tree::check::{check_tree, TreeViolation};
pub use tree::{decode_tree, encode_tree, TreeEntry, TREE_TAG};

#[cfg(test)]
mod tests;

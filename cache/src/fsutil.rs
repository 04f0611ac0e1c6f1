//! Small filesystem helpers: temp paths under a drop guard, atomic writes, permissions,
//! the blob mtime sentinel, and the platform differences between them.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::CacheError;

/// The mtime every blob is given when it enters the store (2000-01-01T00:00:00Z).
///
/// Any write to the inode, through whatever hard link, moves the mtime to "now", so a blob
/// whose mtime is not this value has possibly been edited and is re-hashed before it is served.
/// Link, unlink and chmod do not touch the mtime, so materialising by hard link keeps it.
pub(crate) const BLOB_MTIME: Duration = Duration::from_secs(946_684_800);

pub(crate) fn blob_mtime() -> SystemTime {
    UNIX_EPOCH + BLOB_MTIME
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique name for a temp file: pid, a process-wide counter and the clock, so that two
/// processes (or a restarted one that reuses a pid) never collide.
pub(crate) fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}{}-{n}-{t:x}", std::process::id())
}

/// A path that is removed (file or whole tree) when dropped unless [`TempPath::keep`] is called.
pub(crate) struct TempPath {
    path: Option<PathBuf>,
}

impl TempPath {
    pub(crate) fn new(path: PathBuf) -> TempPath {
        TempPath { path: Some(path) }
    }

    pub(crate) fn path(&self) -> &Path {
        self.path.as_deref().expect("temp path used after keep")
    }

    /// Disarm the guard (the path was renamed away or is wanted).
    pub(crate) fn keep(mut self) -> PathBuf {
        self.path.take().expect("temp path kept twice")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = remove_any(&p);
        }
    }
}

/// Remove a file, symlink or directory tree, clearing read-only bits where the platform needs it.
pub(crate) fn remove_any(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        #[cfg(windows)]
        clear_readonly_tree(path);
        fs::remove_dir_all(path)
    } else {
        #[cfg(windows)]
        if meta.permissions().readonly() {
            let mut p = meta.permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            p.set_readonly(false);
            let _ = fs::set_permissions(path, p);
        }
        fs::remove_file(path)
    }
}

#[cfg(windows)]
fn clear_readonly_tree(path: &Path) {
    if let Ok(rd) = fs::read_dir(path) {
        for e in rd.flatten() {
            let p = e.path();
            if let Ok(m) = fs::symlink_metadata(&p) {
                if m.is_dir() {
                    clear_readonly_tree(&p);
                } else if m.permissions().readonly() {
                    let mut perm = m.permissions();
                    #[allow(clippy::permissions_set_readonly_false)]
                    perm.set_readonly(false);
                    let _ = fs::set_permissions(&p, perm);
                }
            }
        }
    }
}

/// Rename `from` onto `to`, replacing a file at `to`. On Windows a read-only destination
/// cannot be replaced, so its read-only bit is cleared first.
pub(crate) fn rename_replace(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        #[cfg(windows)]
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            remove_any(to)?;
            fs::rename(from, to)
        }
        Err(e) => Err(e),
    }
}

/// Make a file read-only, keeping (or setting) the executable bits on unix.
pub(crate) fn set_readonly(path: &Path, executable: bool) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = if executable { 0o555 } else { 0o444 };
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = executable;
        let mut p = fs::metadata(path)?.permissions();
        p.set_readonly(true);
        fs::set_permissions(path, p)
    }
}

/// Whether the file's owner-executable bit is set (always false on Windows, which has none).
pub(crate) fn is_executable(meta: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o100 != 0
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// What a file that is not a regular file, folder or symlink is, for an error message.
pub(crate) fn odd_kind(ft: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        } else if ft.is_socket() {
            return "a socket";
        } else if ft.is_char_device() {
            return "a character device";
        } else if ft.is_block_device() {
            return "a block device";
        }
    }
    if ft.is_dir() {
        "a folder"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

/// Number of hard links to the inode (1 where the platform cannot tell).
pub(crate) fn nlink(meta: &fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.nlink()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        1
    }
}

/// Reset a stored blob's mtime to the sentinel (after a re-hash proved its content intact).
pub(crate) fn reset_blob_mtime(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        // futimens on a read-only descriptor is allowed for the owner.
        let f = fs::File::open(path)?;
        f.set_modified(blob_mtime())
    }
    #[cfg(not(unix))]
    {
        let meta = fs::metadata(path)?;
        let mut p = meta.permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        p.set_readonly(false);
        fs::set_permissions(path, p)?;
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_modified(blob_mtime())?;
        // Flushed while this handle can write: once a blob is named, a stage may hold it open
        // through a hard link with write sharing denied (`cmd`'s `type` does), so the group
        // commit does not open it for writing again (`Store::rename_blob`).
        f.sync_all()?;
        drop(f);
        set_readonly(path, false)
    }
}

/// Create `path`, which must not exist, holding `bytes`; the open file is returned for what the
/// caller does next (fsync, stamp).
pub(crate) fn create_with(path: &Path, bytes: &[u8]) -> Result<fs::File, CacheError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(CacheError::io("create", path))?;
    f.write_all(bytes).map_err(CacheError::io("write", path))?;
    Ok(f)
}

/// Write `bytes` to `dest` atomically: a temp file in `tmp_dir`, optionally fsynced, renamed
/// into place. A reader sees the old content or the new, never a torn file (short of a power
/// loss without `durable`).
pub(crate) fn write_atomic(
    tmp_dir: &Path,
    dest: &Path,
    bytes: &[u8],
    durable: bool,
) -> Result<(), CacheError> {
    let tmp = TempPath::new(tmp_dir.join(unique_name("w-")));
    let f = create_with(tmp.path(), bytes)?;
    if durable {
        f.sync_all().map_err(CacheError::io("fsync", tmp.path()))?;
    }
    drop(f);
    rename_replace(tmp.path(), dest).map_err(CacheError::io("rename into", dest))?;
    tmp.keep();
    Ok(())
}

/// fsync a file or directory by path. Directories cannot be opened for fsync on Windows,
/// where the rename itself is made durable by NTFS's journal, so that is a no-op there.
pub(crate) fn fsync_path(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        fs::File::open(path)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        if fs::metadata(path)?.is_dir() {
            return Ok(());
        }
        OpenOptions::new().write(true).open(path)?.sync_all()
    }
}

/// `syncfs(2)` on the filesystem holding `path`: one flush for every dirty file on it.
#[cfg(target_os = "linux")]
pub(crate) fn syncfs(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path)?;
    // SAFETY: syncfs only reads the descriptor, which `f` keeps open for the call.
    let rc = unsafe { libc::syncfs(f.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The identity and change stamps of a file, as far as the platform exposes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileStamp {
    /// Whether `now` shows the same content as `self` was recorded with. The ctime is compared
    /// too, except for a file carrying the blob mtime sentinel: that is a hard link to a blob,
    /// whose ctime moves every time the blob is linked or unlinked elsewhere, while any write
    /// would still move its mtime off the sentinel.
    pub(crate) fn unchanged(&self, now: &FileStamp) -> bool {
        let sentinel = BLOB_MTIME.as_nanos() as i128;
        self.dev == now.dev
            && self.ino == now.ino
            && self.size == now.size
            && self.mtime_ns == now.mtime_ns
            && (self.ctime_ns == now.ctime_ns || self.mtime_ns == sentinel)
    }

    pub(crate) fn of(meta: &fs::Metadata) -> FileStamp {
        let mtime_ns = nanos_since_epoch(meta.modified());
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileStamp {
                dev: meta.dev(),
                ino: meta.ino(),
                size: meta.len(),
                mtime_ns,
                ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
            }
        }
        #[cfg(not(unix))]
        {
            // Windows has no inode or ctime in std's stable API; the creation time stands in for
            // ctime, and size + mtime carry the rest.
            let ctime_ns = nanos_since_epoch(meta.created());
            FileStamp {
                dev: 0,
                ino: 0,
                size: meta.len(),
                mtime_ns,
                ctime_ns,
            }
        }
    }
}

/// A file time in nanoseconds since the epoch, or -1 where the platform gives none (or one
/// before 1970).
fn nanos_since_epoch(time: io::Result<SystemTime>) -> i128 {
    time.ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(-1)
}

/// Rename `tmp` onto `dest` with `rename`, creating `dest`'s shard folder first when the
/// rename says it is missing (removed by hand); any other failure is real.
pub(crate) fn rename_into_shard(
    tmp: &Path,
    dest: &Path,
    rename: impl Fn(&Path, &Path) -> io::Result<()>,
) -> Result<(), CacheError> {
    match rename(tmp, dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            create_dir_all(dest.parent().expect("a shard path has a parent"))?;
            rename(tmp, dest).map_err(CacheError::io("rename into", dest))
        }
        other => other.map_err(CacheError::io("rename into", dest)),
    }
}

/// Create a directory and its parents.
pub(crate) fn create_dir_all(path: &Path) -> Result<(), CacheError> {
    fs::create_dir_all(path).map_err(CacheError::io("create directory", path))
}

/// Open `path` for reading without following a symlink at its last component: a stage's
/// output that is a link to a host file must be refused, not read through. On Linux this is
/// `O_NOFOLLOW`; elsewhere the path is checked with `symlink_metadata` first (a race there
/// needs a live writer in the sandbox, and heddle reads outputs only after the stage ended).
pub(crate) fn open_nofollow(path: &Path) -> io::Result<fs::File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }
    #[cfg(not(unix))]
    {
        if fs::symlink_metadata(path)?.file_type().is_symlink() {
            return Err(io::Error::other("is a symlink"));
        }
        fs::File::open(path)
    }
}

/// A folder opened to look names up in it (`openat`), not to list it.
#[cfg(unix)]
pub(crate) fn open_dir(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
}

/// `rel` NUL-terminated in a buffer on the stack: `rel` must be shorter than the buffer and
/// hold no NUL.
#[cfg(unix)]
fn c_name(rel: &[u8]) -> io::Result<[u8; 128]> {
    let mut buf = [0u8; 128];
    if rel.len() >= buf.len() || rel.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "name too long"));
    }
    buf[..rel.len()].copy_from_slice(rel);
    Ok(buf)
}

/// Open `rel`, a path of ascii characters relative to `dir`, for reading. `rel` must not hold a
/// NUL; it is copied to a buffer on the stack, so a lookup allocates nothing.
#[cfg(unix)]
pub(crate) fn open_in(dir: &fs::File, rel: &[u8]) -> io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let buf = c_name(rel)?;
    // SAFETY: `buf` is NUL-terminated (zeroed past `rel`), `dir` is an open descriptor, and a
    // descriptor openat returns is owned by nobody else.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            buf.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// What a blob is served on: its type, size and mtime, as `lstat` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NameStat {
    pub(crate) is_file: bool,
    pub(crate) len: u64,
    pub(crate) mtime: Option<SystemTime>,
}

impl From<&fs::Metadata> for NameStat {
    fn from(m: &fs::Metadata) -> NameStat {
        NameStat {
            is_file: m.is_file(),
            len: m.len(),
            mtime: m.modified().ok(),
        }
    }
}

/// `lstat` of `rel` (ascii, relative to `dir`, as for [`open_in`]): the walk covers `rel`'s
/// components only, and nothing is allocated.
#[cfg(unix)]
pub(crate) fn lstat_in(dir: &fs::File, rel: &[u8]) -> io::Result<NameStat> {
    use std::os::fd::AsRawFd;
    let buf = c_name(rel)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `buf` is NUL-terminated, `dir` is an open descriptor, `st` is written in full on
    // success and read only then.
    let st = unsafe {
        if libc::fstatat(
            dir.as_raw_fd(),
            buf.as_ptr().cast(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        st.assume_init()
    };
    let mtime = u64::try_from(st.st_mtime)
        .ok()
        .zip(u32::try_from(st.st_mtime_nsec).ok())
        .map(|(s, ns)| UNIX_EPOCH + Duration::new(s, ns));
    Ok(NameStat {
        is_file: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        len: st.st_size as u64,
        mtime,
    })
}

/// Whether two metadata describe the same inode (always true where that cannot be told).
pub(crate) fn same_inode(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        true
    }
}

/// The paths in `dir`, sorted; a folder that does not exist is empty.
pub(crate) fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, CacheError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CacheError::Io {
                op: "read directory",
                path: dir.to_path_buf(),
                source: e,
            })
        }
    };
    let mut out: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    out.sort();
    Ok(out)
}

/// The first `n` bytes of the file at `p` (fewer if it is shorter).
pub(crate) fn read_prefix(p: &Path, n: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    fs::File::open(p)?.take(n as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Everything `f` holds from its position on, read into a buffer of `capacity` bytes that
/// doubles when full. `File::read_to_end` first asks the file its size and position (an `fstat`
/// and an `lseek`): two of a no-op instance's eight system calls, for an action entry that nearly
/// always fits the buffer. A caller that knows the size passes one byte more, so the read that
/// finds the end has room.
pub(crate) fn read_all(f: &mut fs::File, capacity: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; capacity.max(64)];
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

//! [`RangeGuardLayer`]: an OpenDAL layer that ends a read with an error once the server has
//! sent more bytes than the read asked for, below the retry layer.
//!
//! OpenDAL's retrying reader counts every chunk against the range it asked for, to resume a
//! broken read where it stopped, and panics when a chunk takes it past the end
//! (`BytesRange::advance underflow`). A server whose HEAD says 769 bytes and whose GET then
//! sends 2 GiB crashed the instance reading it ("heddle failed on this instance ... please
//! report it"). Under this layer the retrying reader never sees a byte past the range: the read
//! fails instead, as not worth retrying, and heddle's own limits (`bounded.rs`) say why.

use std::fmt::Debug;

use opendal::raw::{
    oio, Access, Layer, LayeredAccess, OpList, OpRead, OpWrite, RpDelete, RpList, RpRead, RpWrite,
};
use opendal::{Buffer, Error, ErrorKind, Result};

/// The message of the error a guarded read ends with; `opendal_backend.rs` recognises it.
pub(crate) const MORE_THAN_ASKED: &str = "the server sent more bytes than were asked for";

/// See the module doc. Goes on the operator before (inside) the retry layer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RangeGuardLayer;

impl<A: Access> Layer<A> for RangeGuardLayer {
    type LayeredAccess = RangeGuard<A>;

    fn layer(&self, inner: A) -> RangeGuard<A> {
        RangeGuard { inner }
    }
}

#[derive(Debug)]
pub(crate) struct RangeGuard<A> {
    inner: A,
}

impl<A: Access> LayeredAccess for RangeGuard<A> {
    type Inner = A;
    type Reader = GuardedReader<A::Reader>;
    type Writer = A::Writer;
    type Lister = A::Lister;
    type Deleter = A::Deleter;
    type Copier = A::Copier;

    fn inner(&self) -> &A {
        &self.inner
    }

    async fn read(&self, path: &str, args: OpRead) -> Result<(RpRead, Self::Reader)> {
        let left = args.range().size();
        let (rp, reader) = self.inner.read(path, args).await?;
        Ok((
            rp,
            GuardedReader {
                inner: reader,
                left,
            },
        ))
    }

    async fn write(&self, path: &str, args: OpWrite) -> Result<(RpWrite, Self::Writer)> {
        self.inner.write(path, args).await
    }

    async fn delete(&self) -> Result<(RpDelete, Self::Deleter)> {
        self.inner.delete().await
    }

    async fn list(&self, path: &str, args: OpList) -> Result<(RpList, Self::Lister)> {
        self.inner.list(path, args).await
    }
}

/// A reader that fails once more than `left` bytes arrive (`None`: no limit asked).
pub(crate) struct GuardedReader<R> {
    inner: R,
    left: Option<u64>,
}

impl<R: oio::Read> oio::Read for GuardedReader<R> {
    async fn read(&mut self) -> Result<Buffer> {
        let buf = self.inner.read().await?;
        if let Some(left) = self.left.as_mut() {
            let n = buf.len() as u64;
            if n > *left {
                // Persistent: a retry would get the same lie.
                return Err(Error::new(ErrorKind::Unexpected, MORE_THAN_ASKED));
            }
            *left -= n;
        }
        Ok(buf)
    }
}

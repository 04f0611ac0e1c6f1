//! The one rustls crypto provider (ring) every TLS client of the remote cache uses. reqwest is
//! built without a provider of its own, so it takes the process default: set here, once,
//! before any client is built (a process that set another default keeps it).

/// Make ring the process's rustls provider if none is set yet.
pub(crate) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

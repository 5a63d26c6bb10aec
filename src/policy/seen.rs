//! What `evaluate` sees of the HTTP request beyond the MCP message: the client's address
//! (axum's `ConnectInfo<SocketAddr>`, when the server was served with it) and the extension
//! types the builder named (`GateBuilder::evaluation_extension`), which outer middleware set.
//! Nothing else of the request's extensions is copied: a policy sees what the application
//! chose to show it.

use std::net::SocketAddr;

use http::Extensions;

/// Copies one extension type from a request's extensions into an evaluation's.
pub(crate) type ExtensionCopy = fn(&Extensions, &mut Extensions);

/// The copy of extension type `T`.
pub(crate) fn copy_of<T: Clone + Send + Sync + 'static>() -> ExtensionCopy {
    |from, to| {
        if let Some(value) = from.get::<T>() {
            to.insert(value.clone());
        }
    }
}

/// The client's address, from axum's `ConnectInfo` (`into_make_service_with_connect_info`).
#[cfg(feature = "axum")]
pub(crate) fn client_address(extensions: &Extensions) -> Option<SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0)
        .or_else(|| extensions.get::<SocketAddr>().copied())
}

/// The client's address, as a `SocketAddr` extension of the server's.
#[cfg(not(feature = "axum"))]
pub(crate) fn client_address(extensions: &Extensions) -> Option<SocketAddr> {
    extensions.get::<SocketAddr>().copied()
}

/// What `copies` copy of `from`: nothing is allocated when there is nothing to copy.
pub(crate) fn copied(from: &Extensions, copies: &[ExtensionCopy]) -> Extensions {
    let mut to = Extensions::new();
    for copy in copies {
        copy(from, &mut to);
    }
    to
}

/// What a later question about the same request sees once the request itself has gone on
/// (a listing's entries are judged after the list is forwarded): the copied types, and the
/// client's address as a `SocketAddr`, which [`client_address`] reads back.
pub(crate) fn snapshot(from: &Extensions, copies: &[ExtensionCopy]) -> Extensions {
    let mut seen = copied(from, copies);
    if let Some(address) = client_address(from) {
        seen.insert(address);
    }
    seen
}

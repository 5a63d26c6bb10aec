//! `X-Forwarded-For` from a load balancer in front (`[forwarded] trust = true`; off by
//! default).
//!
//! Only the last entry is read: it is the one the load balancer itself appended, the address
//! it saw. Earlier entries are whatever the client wrote, and a client could use them to pose
//! as another address to a policy reading `client_address`. The address the policy sees is
//! replaced only when that last entry is an IP address; otherwise the connection's stays.
//! `X-Forwarded-Proto` and `X-Forwarded-Host` are never read: the resource URI in the file
//! says what clients connect to, whatever a header claims.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::Request;

/// The header.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The client's address per the last `X-Forwarded-For` entry, when it is an IP address.
pub fn client_address(request: &Request<Body>) -> Option<IpAddr> {
    let last = request
        .headers()
        .get_all(X_FORWARDED_FOR)
        .iter()
        .next_back()?;
    let entry = last.to_str().ok()?.rsplit(',').next()?.trim();
    entry.parse().ok()
}

/// Puts the forwarded address where the gate reads the client's (port 0: not known).
pub fn apply(request: &mut Request<Body>) {
    if let Some(ip) = client_address(request) {
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::new(ip, 0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&str]) -> Request<Body> {
        let mut builder = Request::builder();
        for value in values {
            builder = builder.header(X_FORWARDED_FOR, *value);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn only_the_entry_the_balancer_appended_counts() {
        let request = with(&["6.6.6.6, 10.0.0.7"]);
        assert_eq!(client_address(&request), Some("10.0.0.7".parse().unwrap()));
        let request = with(&["6.6.6.6", "10.0.0.8"]);
        assert_eq!(client_address(&request), Some("10.0.0.8".parse().unwrap()));
    }

    #[test]
    fn anything_but_an_address_is_ignored() {
        assert_eq!(client_address(&with(&["10.0.0.7, unknown"])), None);
        assert_eq!(client_address(&with(&[])), None);
        let mut request = with(&["not-an-ip"]);
        apply(&mut request);
        assert!(
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .is_none()
        );
    }
}

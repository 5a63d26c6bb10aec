//! DNS rebinding: a browser page on another site can reach a server on the user's machine or
//! network under a name it controls, and the browser then sends that site's `Origin`. The
//! Streamable HTTP transport says servers must validate `Origin`, so the layer refuses a
//! request whose `Origin` is present and not allowed, before any other work (CORS preflights
//! included). Requests without `Origin` (every non-browser client) are not affected. The
//! metadata routes sit outside the layer and stay open to every origin.

use http::{HeaderMap, StatusCode, header};

use crate::enforce::reply::{Reply, refusal};
use crate::mcp::{INVALID_REQUEST, ProtocolError};
use crate::settings::Origins;

impl Origins {
    /// The 403 to send for a request whose `Origin` is not allowed; `None` for a request
    /// without `Origin` or with an allowed one.
    pub(crate) fn refusal(&self, headers: &HeaderMap) -> Option<Reply> {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let origin = values.next()?;
        let allowed = match self {
            Origins::Any => true,
            Origins::Only(list) => {
                values.next().is_none()
                    && origin.to_str().is_ok_and(|origin| {
                        list.iter()
                            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
                    })
            }
        };
        if allowed {
            return None;
        }
        tracing::info!(target: "mcp_gate::request", status = 403, "request refused: Origin not allowed");
        Some(refusal(&ProtocolError::new(
            StatusCode::FORBIDDEN,
            INVALID_REQUEST,
            "the Origin of this request is not allowed",
        )))
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn with(origins: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for origin in origins {
            headers.append(header::ORIGIN, HeaderValue::from_static(origin));
        }
        headers
    }

    #[test]
    fn only_listed_origins_get_in() {
        let only = Origins::Only(vec!["https://mcp.example".into()]);
        assert!(
            only.refusal(&with(&[])).is_none(),
            "no Origin: not a browser"
        );
        assert!(only.refusal(&with(&["https://mcp.example"])).is_none());
        assert!(only.refusal(&with(&["HTTPS://MCP.EXAMPLE"])).is_none());
        for refused in [
            &["http://evil.example.com"][..],
            &["null"],
            &["https://mcp.example.evil.com"],
            &["https://mcp.example:8443"],
            &["https://mcp.example", "https://mcp.example"],
        ] {
            let answer = only.refusal(&with(refused)).expect("refused");
            assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{refused:?}");
        }
        assert!(
            Origins::Any
                .refusal(&with(&["http://evil.example.com"]))
                .is_none()
        );
    }
}

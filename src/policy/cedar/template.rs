//! Templates in remediation annotations, filled from the request's Cedar context.
//!
//! The threat: a request's arguments end up in what the layer tells the client (an approval
//! URL, an `authorization_details` object). Spliced into a string, `{"x":"a\",\"type\":..."}`
//! or `../../admin?` would rewrite them. So:
//!
//! - a **JSON template** (`@authorization_details`) is parsed once, at load; only a string
//!   value that is *wholly* a placeholder (`"{context.input.amount}"`) is replaced, by the
//!   JSON value found there (a number stays a number; a missing value is `null`). A
//!   placeholder inside a longer string is refused at load;
//! - a **URL template** (`@url`) is either wholly one placeholder, which must name a
//!   `context.app` attribute (the application built the URL in its context hook) and whose
//!   value must be an absolute `http(s)` URL, or a URL
//!   whose placeholders stand after its authority and are filled percent-encoded (every byte
//!   but the RFC 3986 unreserved ones), so a value can add neither a path segment, a query
//!   parameter nor a fragment;
//! - a **text template** (`@message`) is plain text for people: placeholders are replaced by
//!   the value's text (a string as is, anything else as JSON).
//!
//! Placeholders are paths into the Cedar context (`context.input.folder`, `context.app.url`,
//! `context.gate.era`) or the principal (`principal.subject`, `principal.client_id`).

use serde_json::Value;

/// Why a template was refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum TemplateError {
    /// A `{` without its `}`, or an empty or unknown placeholder.
    #[error("placeholder {0:?} is not a path into `context` or `principal`")]
    BadPlaceholder(String),
    /// A JSON template that does not parse.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// A placeholder inside a longer JSON string.
    #[error("placeholder inside the JSON string {0:?}: a placeholder must be a whole value")]
    SplicedJson(String),
    /// A URL template whose fixed part is not an absolute `http(s)` URL, or that has a
    /// placeholder before or in its authority.
    #[error("URL template {0:?}: the scheme and host must be fixed text before any placeholder")]
    UrlAuthority(String),
    /// A whole-URL placeholder outside `context.app`: the request would choose the URL.
    #[error(
        "URL template {0:?}: a whole-URL placeholder must name a context.app attribute (the application builds the URL)"
    )]
    UrlFromRequest(String),
}

/// One piece of a text or URL template.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    Text(String),
    Placeholder(Vec<String>),
}

/// A placeholder path (`context.input.folder`) split and checked.
fn placeholder(path: &str) -> Result<Vec<String>, TemplateError> {
    let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
    let rooted = matches!(
        parts.first().map(String::as_str),
        Some("context" | "principal")
    );
    if !rooted || parts.len() < 2 || parts.iter().any(String::is_empty) {
        return Err(TemplateError::BadPlaceholder(path.to_owned()));
    }
    Ok(parts)
}

/// Splits `text` into fixed text and placeholders.
fn pieces(text: &str) -> Result<Vec<Piece>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| TemplateError::BadPlaceholder(rest[open..].to_owned()))?;
        pieces.push(Piece::Placeholder(placeholder(&after[..close])?));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(pieces)
}

/// The value at `path` in `scope` (`{"context": …, "principal": …}`), if any.
fn lookup<'a>(scope: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(scope, |value, key| value.get(key))
}

/// A value as text for people: a string as is, nothing as nothing, anything else as JSON.
fn as_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// Plain text with placeholders (`@message`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TextTemplate(Vec<Piece>);

impl TextTemplate {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        pieces(text).map(Self)
    }

    /// The text, with each placeholder's value.
    pub fn fill(&self, scope: &Value) -> String {
        self.0
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.clone(),
                Piece::Placeholder(path) => as_text(lookup(scope, path)),
            })
            .collect()
    }
}

/// An approval URL (`@url`).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum UrlTemplate {
    /// Wholly one placeholder: the value must itself be an absolute `http(s)` URL.
    Whole(Vec<String>),
    /// Fixed scheme and authority, placeholders filled percent-encoded.
    Pieces(Vec<Piece>),
}

/// Why a URL template gave no URL for one request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum UrlFillError {
    /// The whole-URL placeholder's value is missing, not a string, or not an absolute
    /// `http(s)` URL.
    #[error("the value of the URL placeholder is not an absolute http(s) URL")]
    NotAUrl,
}

impl UrlTemplate {
    /// Parses `text`, refusing a placeholder before the path.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let pieces = pieces(text)?;
        if let [Piece::Placeholder(path)] = pieces.as_slice() {
            if !path.starts_with(&["context".to_owned(), "app".to_owned()]) {
                return Err(TemplateError::UrlFromRequest(text.to_owned()));
            }
            return Ok(Self::Whole(path.clone()));
        }
        // The fixed text before the first placeholder must hold the scheme, the whole
        // authority and the `/` that ends it.
        let fixed = match pieces.first() {
            Some(Piece::Text(text)) => text.as_str(),
            _ => "",
        };
        let authority_ends = fixed
            .split_once("://")
            .and_then(|(_, after)| after.find(['/', '?', '#']));
        let scheme_ok = fixed.starts_with("https://") || fixed.starts_with("http://");
        let absolute = url::Url::parse(fixed).is_ok_and(|u| u.has_host());
        if !scheme_ok || !absolute || (pieces.len() > 1 && authority_ends.is_none()) {
            return Err(TemplateError::UrlAuthority(text.to_owned()));
        }
        Ok(Self::Pieces(pieces))
    }

    /// The URL for one request.
    pub fn fill(&self, scope: &Value) -> Result<String, UrlFillError> {
        match self {
            Self::Whole(path) => {
                let value = lookup(scope, path).and_then(Value::as_str);
                let url = value.and_then(|text| url::Url::parse(text).ok());
                match url {
                    Some(url) if matches!(url.scheme(), "https" | "http") && url.has_host() => {
                        Ok(url.to_string())
                    }
                    _ => Err(UrlFillError::NotAUrl),
                }
            }
            Self::Pieces(pieces) => Ok(pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Text(text) => text.clone(),
                    Piece::Placeholder(path) => percent_encode(&as_text(lookup(scope, path))),
                })
                .collect()),
        }
    }
}

/// Every byte but the RFC 3986 unreserved ones, percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// A JSON value with whole-value placeholders (`@authorization_details`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JsonTemplate(Value);

impl JsonTemplate {
    /// Parses `text` as JSON and checks every string in it.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| TemplateError::NotJson(e.to_string()))?;
        check_json(&value)?;
        Ok(Self(value))
    }

    /// The value for one request.
    pub fn fill(&self, scope: &Value) -> Value {
        fill_json(&self.0, scope)
    }
}

/// The placeholder a JSON string wholly is, if it is one.
fn whole_placeholder(text: &str) -> Option<&str> {
    text.strip_prefix('{')?.strip_suffix('}')
}

fn check_json(value: &Value) -> Result<(), TemplateError> {
    match value {
        Value::String(text) => match whole_placeholder(text) {
            Some(path) => placeholder(path).map(drop),
            None if text.contains('{') => Err(TemplateError::SplicedJson(text.clone())),
            None => Ok(()),
        },
        Value::Array(items) => items.iter().try_for_each(check_json),
        Value::Object(map) => map.values().try_for_each(check_json),
        _ => Ok(()),
    }
}

fn fill_json(value: &Value, scope: &Value) -> Value {
    match value {
        Value::String(text) => match whole_placeholder(text) {
            Some(path) => {
                let path: Vec<String> = path.split('.').map(str::to_owned).collect();
                lookup(scope, &path).cloned().unwrap_or(Value::Null)
            }
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_json(v, scope)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_json(v, scope)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scope() -> Value {
        json!({
            "context": {
                "input": {"folder": "a/../b?x=1#f", "amount": 40, "iban": "DE1\"}"},
                "app": {"url": "https://approve.example/a/1"},
            },
            "principal": {"subject": "alice"},
        })
    }

    #[test]
    fn text_takes_values_as_text() {
        let template = TextTemplate::parse("Share {context.input.folder} as {principal.subject} ({context.input.amount}){context.none}").unwrap();
        assert_eq!(template.fill(&scope()), "Share a/../b?x=1#f as alice (40)");
        assert!(TextTemplate::parse("{input.folder}").is_err(), "unrooted");
        assert!(TextTemplate::parse("{context.}").is_err());
        assert!(TextTemplate::parse("open {context.x").is_err());
    }

    #[test]
    fn url_values_cannot_leave_their_segment() {
        let template =
            UrlTemplate::parse("https://app.example/approve/{context.input.folder}?v=1").unwrap();
        assert_eq!(
            template.fill(&scope()).unwrap(),
            "https://app.example/approve/a%2F..%2Fb%3Fx%3D1%23f?v=1"
        );
        for refused in [
            "https://{context.input.folder}/x",
            "{context.input.folder}/x",
            "https://app.example{context.input.folder}",
            "ftp://app.example/{context.input.folder}",
            "not a url/{context.input.folder}",
        ] {
            assert!(UrlTemplate::parse(refused).is_err(), "{refused}");
        }
        let whole = UrlTemplate::parse("{context.app.url}").unwrap();
        assert_eq!(whole.fill(&scope()).unwrap(), "https://approve.example/a/1");
        assert_eq!(
            UrlTemplate::parse("{context.input.folder}"),
            Err(TemplateError::UrlFromRequest(
                "{context.input.folder}".into()
            )),
            "the request never chooses the whole URL"
        );
        let mut not_url = scope();
        not_url["context"]["app"]["url"] = json!("javascript:alert(1)");
        assert_eq!(whole.fill(&not_url), Err(UrlFillError::NotAUrl));
    }

    #[test]
    fn json_placeholders_are_whole_typed_values() {
        let template = JsonTemplate::parse(
            r#"[{"type":"payment","amount":"{context.input.amount}","iban":"{context.input.iban}","missing":"{context.input.none}","fixed":"EUR"}]"#,
        )
        .unwrap();
        assert_eq!(
            template.fill(&scope()),
            json!([{"type":"payment","amount":40,"iban":"DE1\"}","missing":null,"fixed":"EUR"}])
        );
        assert!(matches!(
            JsonTemplate::parse(r#"{"iban":"DE{context.input.iban}"}"#),
            Err(TemplateError::SplicedJson(_))
        ));
        assert!(matches!(
            JsonTemplate::parse("{"),
            Err(TemplateError::NotJson(_))
        ));
    }
}

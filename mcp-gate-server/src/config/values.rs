//! The value types a configuration file holds that TOML has no type for: durations (`"5s"`,
//! `"250ms"`), http(s) URLs, scopes. Each checks its text while the file is read, so that a
//! bad value is refused with the line it is on.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A duration written as text: `"250ms"`, `"5s"`, `"2m"`, `"1h 30m"` (humantime's grammar).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration);

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text)
            .map(Span)
            .map_err(|error| {
                serde::de::Error::custom(format!(
                    "`{text}` is not a duration ({error}); write it as \"250ms\", \"5s\", \"2m\" or \"1h\""
                ))
            })
    }
}

/// An absolute `http` or `https` URL, checked while the file is read. The text is kept as
/// written: an issuer identifier is compared character by character with a token's `iss`,
/// and a parser's normal form (a `/` added to an empty path) would not match it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    text: String,
    /// The URL, parsed.
    pub url: url::Url,
}

impl HttpUrl {
    /// The URL as written in the file.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let url = url::Url::parse(&text).map_err(|error| {
            serde::de::Error::custom(format!("`{text}` is not an absolute URL ({error})"))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(serde::de::Error::custom(format!(
                "`{text}` is not an http(s) URL"
            )));
        }
        if url.host_str().is_none() {
            return Err(serde::de::Error::custom(format!("`{text}` has no host")));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(serde::de::Error::custom(format!(
                "`{text}` carries credentials; name an environment variable for secrets instead"
            )));
        }
        if url.fragment().is_some() {
            return Err(serde::de::Error::custom(format!("`{text}` has a fragment")));
        }
        Ok(HttpUrl { text, url })
    }
}

/// The name of an environment variable that holds a secret (never the secret itself).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretVariable(pub String);

impl SecretVariable {
    /// The variable's value, when it is set and not empty.
    pub fn read(&self) -> Option<String> {
        std::env::var(&self.0)
            .ok()
            .filter(|value| !value.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder<T> {
        value: T,
    }

    fn read<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, String> {
        toml::from_str::<Holder<T>>(text)
            .map(|holder| holder.value)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn durations_in_every_unit_and_refusals_name_the_text() {
        assert_eq!(
            read::<Span>("value = \"250ms\"").unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!(
            read::<Span>("value = \"2m\"").unwrap().0,
            Duration::from_secs(120)
        );
        let error = read::<Span>("value = \"soon\"").unwrap_err();
        assert!(error.contains("`soon` is not a duration"), "{error}");
        assert!(read::<Span>("value = 5").is_err());
    }

    #[test]
    fn urls_must_be_absolute_http_without_credentials() {
        assert!(read::<HttpUrl>("value = \"http://127.0.0.1:3000/mcp\"").is_ok());
        // The text as written: an issuer without a path stays without one.
        let issuer = read::<HttpUrl>("value = \"http://127.0.0.1:9000\"").unwrap();
        assert_eq!(issuer.as_str(), "http://127.0.0.1:9000");
        for bad in [
            "value = \"/mcp\"",
            "value = \"ftp://host/x\"",
            "value = \"http://user:pw@host/mcp\"",
            "value = \"http://host/mcp#x\"",
        ] {
            assert!(read::<HttpUrl>(bad).is_err(), "{bad} was accepted");
        }
    }
}

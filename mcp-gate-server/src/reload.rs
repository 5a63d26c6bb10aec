//! Reloading without a restart: on SIGHUP, and when the file or the policy folder changes
//! (checked every `[reload] watch-interval`), the file is read again and a new gate is built
//! and installed ([`Live::install`]); calls in flight finish on the gate they started with.
//!
//! Threat: a bad edit must not open the gate or take it down. A file that does not read, a
//! policy set that does not validate, or a change to what only a restart can change
//! (listeners, TLS, `[redis]`, `[sessions]`, `[audit]`) is refused: the last good gate stays in force and
//! the log says why, with the file and line. The new gate's keys are fetched before it takes
//! traffic; a new gate that cannot fetch them does not replace a running one that has them.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::assemble::Lasting;
use crate::config::Config;
use crate::live::Live;

/// Why a reload was refused (the gate in force stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file was refused.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The gate could not be built from it.
    #[error(transparent)]
    Assemble(#[from] crate::assemble::AssembleError),
    /// The new gate could not fetch its keys (or reach its stores) while the running one has
    /// them.
    #[error(
        "{file}: the new configuration was not put in force, {why}; the running configuration, which is ready, stays (SIGHUP tries again)"
    )]
    NotReady {
        /// The file.
        file: String,
        /// The readiness report.
        why: String,
    },
    /// The file changes what only a restart can change.
    #[error("{file}: {key} changed: that takes a restart; the running configuration stays")]
    NeedsRestart {
        /// The file.
        file: String,
        /// The key.
        key: &'static str,
    },
}

/// What a reload re-reads, and what it must not change.
pub struct Reloader {
    path: PathBuf,
    live: Live,
    lasting: Lasting,
    metrics: Option<PrometheusHandle>,
    /// What only a restart changes, as the process started with it.
    fixed: Fixed,
    /// One reload at a time: SIGHUP and the watch never build two gates at once.
    running: tokio::sync::Mutex<()>,
}

/// The keys a reload must leave as they were, as text to compare.
#[derive(Debug, PartialEq, Eq)]
struct Fixed {
    listen: String,
    tls: String,
    operations: String,
    redis: String,
    sessions: String,
    audit: String,
    development_issuer: String,
    task_notifications: bool,
}

impl Fixed {
    fn of(config: &Config) -> Self {
        let file = &config.file;
        Self {
            listen: file.listen.to_string(),
            tls: format!("{:?}", file.tls),
            operations: format!("{:?}", file.operations.as_ref().map(|o| o.get_ref())),
            redis: format!("{:?}", file.redis.as_ref().map(|r| r.get_ref())),
            sessions: format!("{:?}", file.sessions),
            audit: format!("{:?}", file.audit),
            development_issuer: format!(
                "{:?}",
                file.development_issuer.as_ref().map(|d| d.get_ref())
            ),
            task_notifications: file.tasks.notifications.is_some(),
        }
    }

    /// The first key that differs between `self` and `other`.
    fn changed(&self, other: &Self) -> Option<&'static str> {
        if self.listen != other.listen {
            Some("listen")
        } else if self.tls != other.tls {
            Some("[tls]")
        } else if self.operations != other.operations {
            Some("[operations]")
        } else if self.redis != other.redis {
            Some("[redis]")
        } else if self.sessions != other.sessions {
            Some("[sessions]")
        } else if self.audit != other.audit {
            Some("[audit]")
        } else if self.development_issuer != other.development_issuer {
            Some("[development-issuer]")
        } else if self.task_notifications != other.task_notifications {
            Some("[tasks.notifications]")
        } else {
            None
        }
    }
}

impl Reloader {
    /// A reloader of `config`'s file into `live`; what only a restart changes is taken from
    /// `config`, the configuration the process started with.
    pub fn new(
        config: &Config,
        live: Live,
        lasting: Lasting,
        metrics: Option<PrometheusHandle>,
    ) -> Self {
        Self {
            path: config.path.clone(),
            live,
            lasting,
            metrics,
            fixed: Fixed::of(config),
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the file again and installs the gate it makes; refused, the gate in force stays.
    /// Returns how the new gate's policy is named.
    pub async fn reload(&self) -> Result<String, ReloadError> {
        let _one = self.running.lock().await;
        let config = Config::load(&self.path)?;
        if let Some(key) = self.fixed.changed(&Fixed::of(&config)) {
            return Err(ReloadError::NeedsRestart {
                file: config.path.display().to_string(),
                key,
            });
        }
        let next = crate::serve::build(&config, &self.lasting, self.metrics.as_ref())?;
        // The new gate takes traffic with its keys fetched (for at most KEYS_WAIT): a reload
        // does not turn callers away while a key set is being fetched.
        let report = tokio::time::timeout(KEYS_WAIT, next.gate.load_keys()).await;
        match report {
            Ok(report) if report.is_ready() => {
                tracing::info!("ready: keys loaded for every issuer, stores reachable");
            }
            report => {
                let why = match report {
                    Ok(report) => report.to_string(),
                    Err(_) => format!("not fetched within {KEYS_WAIT:?}"),
                };
                // A gate whose keys are loaded is not traded for one without: a reload while
                // an issuer is unreachable would otherwise refuse every caller until it
                // answers. When the running gate is not ready either, the new one is no worse.
                if self.live.load().gate.readiness().await.is_ready() {
                    return Err(ReloadError::NotReady {
                        file: config.path.display().to_string(),
                        why,
                    });
                }
                tracing::warn!(%why, "the new configuration is not ready either; it takes traffic now (/readyz says why)");
            }
        }
        let name = next.policy_name.clone();
        self.live.install(next);
        Ok(name)
    }

    async fn reload_logged(&self, why: &str) {
        match self.reload().await {
            Ok(policy) => {
                tracing::info!(%policy, trigger = why, "reloaded; new calls take the new configuration")
            }
            Err(error) => {
                // One log line, whatever the error: Cedar lists its messages one per line.
                let error = error
                    .to_string()
                    .replace(":\n  ", ": ")
                    .replace("\n  ", "; ")
                    .replace('\n', "; ");
                tracing::error!(%error, trigger = why, "reload refused; the running configuration stays")
            }
        }
    }
}

/// What the watch compares: the bytes of the file at `path`, of every file of the policy
/// folders it names, and of the key files it names that a reload reads again (`[[issuer]]
/// jwks-file`, `[continuation] keys-file`, `[identity] key-file`): content, not modification
/// times, so an edit within the same second, or one that keeps the time, is seen.
pub fn fingerprint(path: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    let text = std::fs::read(path).unwrap_or_default();
    text.hash(&mut hasher);
    if let Ok(config) = Config::parse(path, &String::from_utf8_lossy(&text)) {
        let policy = config.file.policy.get_ref();
        for folder in [&policy.cedar, &policy.shadow_cedar].into_iter().flatten() {
            hash_folder(&config.resolve(folder), &mut hasher);
        }
        for key_file in key_files(&config) {
            let key_file = config.resolve(key_file);
            key_file.hash(&mut hasher);
            std::fs::read(&key_file)
                .unwrap_or_default()
                .hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// The key files `config` names that a reload reads again.
fn key_files(config: &Config) -> impl Iterator<Item = &PathBuf> {
    let file = &config.file;
    let issuers = file
        .issuers
        .iter()
        .filter_map(|issuer| issuer.get_ref().jwks_file.as_ref());
    let identity = file
        .identity
        .as_ref()
        .and_then(|identity| identity.get_ref().key_file.as_ref());
    issuers
        .chain(file.continuation.keys_file.as_ref())
        .chain(identity)
}

/// [`fingerprint`], off the runtime's threads.
async fn fingerprint_of(path: &Path) -> Option<u64> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || fingerprint(&path))
        .await
        .ok()
}

/// Every file's name and bytes in `folder`, in name order.
fn hash_folder(folder: &Path, hasher: &mut DefaultHasher) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        "unreadable".hash(hasher);
        return;
    };
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    for name in names {
        name.hash(hasher);
        std::fs::read(&name).unwrap_or_default().hash(hasher);
    }
}

/// How long a change must stay as it is before the watch reloads it: a file being written
/// (truncated, then filled) is not read half-done.
pub const SETTLE: Duration = Duration::from_millis(100);

/// How long a reload waits for the new gate's keys.
pub const KEYS_WAIT: Duration = Duration::from_secs(10);

/// SIGHUP, caught from now on (its default action ends the process): made first thing at
/// start, so that a SIGHUP while the gateway starts does not stop it.
pub fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(hangups) => Some(hangups),
        Err(error) => {
            tracing::warn!(%error, "no SIGHUP handler: reloads come from the watch only");
            None
        }
    }
}

/// Runs `reloader` for the life of the process: on every SIGHUP of `hangups`, and the watch
/// every `every` (never when zero). `seen` is the fingerprint of the files the running configuration was read
/// from, taken before they were read: a change made while the process started is reloaded
/// at the first check.
pub fn spawn(
    reloader: Reloader,
    hangups: Option<tokio::signal::unix::Signal>,
    every: Duration,
    seen: u64,
) {
    let reloader = std::sync::Arc::new(reloader);
    let on_signal = std::sync::Arc::clone(&reloader);
    if let Some(mut hangups) = hangups {
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                on_signal.reload_logged("SIGHUP").await;
            }
        });
    }
    if every.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let mut seen = seen;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(now) = fingerprint_of(&reloader.path).await else {
                continue;
            };
            if now == seen {
                continue;
            }
            // Still changing: the next check looks again.
            tokio::time::sleep(SETTLE.min(every)).await;
            if fingerprint_of(&reloader.path).await != Some(now) {
                continue;
            }
            seen = now;
            reloader.reload_logged("file changed").await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_only_a_restart_changes_is_named_and_the_rest_is_not() {
        let base = "listen = \"127.0.0.1:8080\"\n[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[resource]\nuri = \"http://127.0.0.1:8080/mcp\"\n[[issuer]]\nurl = \"http://127.0.0.1:3\"\n[policy]\nallow-all = true\n";
        let fixed = |text: &str| match Config::parse(Path::new("gateway.toml"), text) {
            Ok(config) => Fixed::of(&config),
            Err(error) => panic!("{error}"),
        };
        let running = fixed(base);
        for (edit, key) in [
            (
                base.replace(":8080\"\n[upstream]", ":8081\"\n[upstream]"),
                "listen",
            ),
            (
                format!("{base}[redis]\nurl = \"redis://127.0.0.1:6379/\"\n"),
                "[redis]",
            ),
            (format!("{base}[sessions]\ncapacity = 5\n"), "[sessions]"),
            (
                format!("{base}[operations]\nlisten = \"127.0.0.1:9090\"\n"),
                "[operations]",
            ),
            (
                format!("{base}[audit]\nfile = \"audit.jsonl\"\n"),
                "[audit]",
            ),
        ] {
            assert_eq!(running.changed(&fixed(&edit)), Some(key), "{edit}");
        }
        for edit in [
            base.replace(
                "allow-all = true",
                "allow-all = true\nallow-destructive = true",
            ),
            format!("{base}[tokens]\nrequired-scopes = [\"mcp:read\"]\n"),
            format!("{base}[[limits.rate]]\nscope = \"tool\"\nrequests = 1\nperiod = \"1m\"\n"),
            format!("{base}[requests]\nmax-body-bytes = 1024\n"),
        ] {
            assert_eq!(running.changed(&fixed(&edit)), None, "{edit}");
        }
    }

    #[test]
    fn the_fingerprint_sees_an_edit_of_the_same_size_in_the_same_second() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        let cedar = dir.path().join("cedar");
        std::fs::create_dir(&cedar).unwrap();
        let file = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[resource]\nuri = \"http://127.0.0.1:2/mcp\"\n[[issuer]]\nurl = \"http://127.0.0.1:3\"\n[policy]\ncedar = \"cedar\"\n";
        std::fs::write(&path, file).unwrap();
        std::fs::write(
            cedar.join("p.cedar"),
            "permit (principal, action, resource);",
        )
        .unwrap();
        let first = fingerprint(&path);
        assert_eq!(fingerprint(&path), first, "stable while nothing changes");
        // Same length, same second: only the bytes differ.
        std::fs::write(
            cedar.join("p.cedar"),
            "forbid (principal, action, resource);",
        )
        .unwrap();
        let second = fingerprint(&path);
        assert_ne!(second, first, "a policy edit");
        std::fs::write(&path, file.replace(":1/mcp", ":4/mcp")).unwrap();
        assert_ne!(fingerprint(&path), second, "a file edit");
        std::fs::write(cedar.join("q.cedar"), "").unwrap();
        assert_ne!(fingerprint(&path), second, "a policy file added");
    }

    #[test]
    fn the_fingerprint_sees_a_replaced_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        let file = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[resource]\nuri = \"http://127.0.0.1:2/mcp\"\n[[issuer]]\nurl = \"http://127.0.0.1:3\"\njwks-file = \"jwks.json\"\n[policy]\nallow-all = true\n[continuation]\nkeys-file = \"keys\"\n[identity]\nkey-file = \"identity.pem\"\n";
        std::fs::write(&path, file).unwrap();
        let config = Config::parse(&path, file).expect("the file parses");
        assert_eq!(key_files(&config).count(), 3);
        for (name, first, second) in [
            ("jwks.json", "{\"keys\":[1]}", "{\"keys\":[2]}"),
            ("keys", "k1=aaaa", "k1=bbbb"),
            ("identity.pem", "pem-1", "pem-2"),
        ] {
            std::fs::write(dir.path().join(name), first).unwrap();
            let before = fingerprint(&path);
            assert_eq!(fingerprint(&path), before, "{name}: stable");
            std::fs::write(dir.path().join(name), second).unwrap();
            assert_ne!(fingerprint(&path), before, "{name} replaced");
        }
    }
}

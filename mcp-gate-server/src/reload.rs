//! Reloading without a restart: on SIGHUP, and when the file or the policy folder changes
//! (checked every `[reload] watch-interval`), the file is read again and a new gate is built
//! and installed ([`Live::install`]); calls in flight finish on the gate they started with.
//!
//! Threat: a bad edit must not open the gate or take it down. A file that does not read, a
//! policy set that does not validate, or a change to what only a restart can change
//! (listeners, TLS, `[redis]`, `[audit]`) is refused: the last good gate stays in force and
//! the log says why, with the file and line. The new gate's keys are fetched before it takes
//! traffic.

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
    audit: String,
    development_issuer: String,
}

impl Fixed {
    fn of(config: &Config) -> Self {
        let file = &config.file;
        Self {
            listen: file.listen.to_string(),
            tls: format!("{:?}", file.tls),
            operations: format!("{:?}", file.operations.as_ref().map(|o| o.get_ref())),
            redis: format!("{:?}", file.redis.as_ref().map(|r| r.get_ref())),
            audit: format!("{:?}", file.audit),
            development_issuer: format!(
                "{:?}",
                file.development_issuer.as_ref().map(|d| d.get_ref())
            ),
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
        } else if self.audit != other.audit {
            Some("[audit]")
        } else if self.development_issuer != other.development_issuer {
            Some("[development-issuer]")
        } else {
            None
        }
    }
}

impl Reloader {
    /// A reloader of the file at `path` into `live`. The file is read now for what only a
    /// restart changes; it was read a moment ago by the start, so it reads.
    pub fn new(
        path: PathBuf,
        live: Live,
        lasting: Lasting,
        metrics: Option<PrometheusHandle>,
    ) -> Self {
        let fixed = Config::load(&path)
            .map(|config| Fixed::of(&config))
            .unwrap_or(Fixed {
                listen: String::new(),
                tls: String::new(),
                operations: String::new(),
                redis: String::new(),
                audit: String::new(),
                development_issuer: String::new(),
            });
        Self {
            path,
            live,
            lasting,
            metrics,
            fixed,
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the file again and installs the gate it makes; refused, the gate in force stays.
    pub async fn reload(&self) -> Result<(), ReloadError> {
        let _one = self.running.lock().await;
        let config = Config::load(&self.path)?;
        if let Some(key) = self.fixed.changed(&Fixed::of(&config)) {
            return Err(ReloadError::NeedsRestart {
                file: config.path.display().to_string(),
                key,
            });
        }
        let next = crate::serve::build(&config, &self.lasting, self.metrics.as_ref())?;
        // The new gate takes traffic with its keys fetched: a reload does not turn callers
        // away while a key set is being fetched. A key set that cannot be fetched is the same
        // as at start: the gate serves, and /readyz says why it is not ready.
        crate::serve::report_readiness(&next.gate).await;
        let name = next.policy_name.clone();
        self.live.install(next);
        tracing::info!(policy = %name, "reloaded");
        Ok(())
    }

    /// What the watch compares: the file's bytes and every file of the policy folders.
    fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        let text = std::fs::read(&self.path).unwrap_or_default();
        text.hash(&mut hasher);
        if let Ok(config) = Config::parse(&self.path, &String::from_utf8_lossy(&text)) {
            let policy = config.file.policy.get_ref();
            for folder in [&policy.cedar, &policy.shadow_cedar].into_iter().flatten() {
                hash_folder(&config.resolve(folder), &mut hasher);
            }
        }
        hasher.finish()
    }

    async fn reload_logged(&self, why: &str) {
        match self.reload().await {
            Ok(()) => {}
            Err(error) => {
                tracing::error!(%error, trigger = why, "reload refused; the running configuration stays")
            }
        }
    }
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

/// Runs `reloader` for the life of the process: SIGHUP, and the watch every `every` (never
/// when zero).
pub fn spawn(reloader: Reloader, every: Duration) {
    let reloader = std::sync::Arc::new(reloader);
    let on_signal = std::sync::Arc::clone(&reloader);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "no SIGHUP handler: reloads come from the watch only");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            on_signal.reload_logged("SIGHUP").await;
        }
    });
    if every.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let mut seen = reloader.fingerprint();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let now = reloader.fingerprint();
            if now != seen {
                seen = now;
                reloader.reload_logged("file changed").await;
            }
        }
    });
}

//! Helpers shared by the benchmarks.

use std::str::FromStr;

/// A numeric setting from the environment: `default` when unset; the process exits with
/// status 2 and a message when it is set to something outside `min..=max`.
pub fn env_or<T: FromStr + PartialOrd + Copy + std::fmt::Display>(
    name: &str,
    default: T,
    min: T,
    max: T,
) -> T {
    let Ok(raw) = std::env::var(name) else {
        return default;
    };
    match raw.trim().parse::<T>() {
        Ok(value) if value >= min && value <= max => value,
        _ => {
            eprintln!("{name}={raw:?} is not a number in {min}..={max}");
            std::process::exit(2);
        }
    }
}

/// Sends `request` to `app` in process and reads the answer whole: its status and body.
#[allow(dead_code, reason = "not every bench sends requests")]
pub async fn send(
    app: &axum::Router,
    request: http::Request<axum::body::Body>,
) -> (http::StatusCode, bytes::Bytes) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, bytes)
}

/// Clock ticks (USER_HZ, 100 on Linux) of this process, and busy ticks of the whole machine,
/// from `/proc` (zeros elsewhere).
#[derive(Clone, Copy, Default)]
#[allow(dead_code, reason = "not every bench measures CPU")]
pub struct CpuSnapshot {
    pub process: u64,
    pub machine_busy: u64,
}

/// Seconds in one clock tick of [`CpuSnapshot`].
#[allow(dead_code, reason = "not every bench measures CPU")]
pub const TICK_SECS: f64 = 0.01;

#[allow(dead_code, reason = "not every bench measures CPU")]
pub fn cpu_snapshot() -> CpuSnapshot {
    let process = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which may contain spaces) start at field 3.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    let machine_busy = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            let line = stat.lines().next()?;
            let values: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal (guest columns are inside user).
            let total: u64 = values.iter().take(8).sum();
            let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
            Some(total - idle)
        })
        .unwrap_or(0);
    CpuSnapshot {
        process,
        machine_busy,
    }
}

impl CpuSnapshot {
    /// Cores used since `before` by other processes than this one, over `seconds`.
    #[allow(dead_code, reason = "not every bench measures CPU")]
    pub fn others_since(&self, before: &Self, seconds: f64) -> f64 {
        let process = self.process.saturating_sub(before.process);
        let machine = self.machine_busy.saturating_sub(before.machine_busy);
        machine.saturating_sub(process) as f64 * TICK_SECS / seconds
    }
}

/// The load average (1, 5 and 15 minutes), for the report.
#[allow(dead_code, reason = "not every bench prints it")]
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

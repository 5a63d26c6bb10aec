//! Loopback ports for servers a test must name before they start (a resource URI, a
//! configuration file, a `redis-server` command line).
//!
//! A port found by binding port 0 and letting go comes from the kernel's ephemeral range, where
//! any other process (an SDK server binding port 0, any outgoing connection) may be handed the
//! same port before the test's own server binds it; CI once lost a run to that. The ports here
//! are taken below the ephemeral range, which the kernel never hands out on its own, one number
//! at a time per test process (so two tests of one binary never get the same one), from a start
//! that depends on the process id (so two binaries rarely walk the same numbers), and each is
//! checked free by binding it before it is given.
//!
//! Shared by the crate's tests and the gateway's (`mcp-gate-server/tests/common`, by path).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out.
const FLOOR: u32 = 10_000;
/// Where the kernel's own range starts when `/proc` does not say (Linux's default).
const DEFAULT_EPHEMERAL_START: u32 = 32_768;

/// The first port of the kernel's ephemeral range on this machine.
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_START)
}

/// A loopback port that is free now and that no bind to port 0 is handed while the test holds
/// its number (see the module's comment); falls back to the kernel's choice on a machine whose
/// ephemeral range leaves no room below it.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let top = ephemeral_start();
    if top <= FLOOR + 1_000 {
        return kernel_port();
    }
    let span = top - FLOOR;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let candidate = FLOOR + (start + step) % span;
        let Ok(port) = u16::try_from(candidate) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {FLOOR} and {top}");
}

/// `N` distinct free loopback ports.
pub fn free_ports<const N: usize>() -> [u16; N] {
    [(); N].map(|()| free_port())
}

/// A port the kernel picks (bound to port 0, then let go).
fn kernel_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

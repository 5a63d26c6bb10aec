#!/usr/bin/env bash
# Install what building every feature needs beyond the Rust toolchain and gcc: the `native-tls`
# feature (part of `--all-features`, which CI lints and documents) links the system OpenSSL on
# Linux, so it needs OpenSSL's headers and pkg-config. Idempotent: nothing happens when they are
# there. The default features need only a C compiler (aws-lc-sys); `crypto-rust` and `axum`
# alone need none.
set -euo pipefail

log() { printf 'setup-build: %s\n' "$*" >&2; }

if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl 2>/dev/null; then
  exit 0
fi
as_root=()
[[ "$(id -u)" -eq 0 ]] || as_root=(sudo -n)
if command -v apt-get >/dev/null 2>&1; then
  log "apt-get install libssl-dev pkg-config"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends libssl-dev pkg-config >/dev/null
else
  log "OpenSSL headers or pkg-config are missing and apt-get is not available: install them"
  exit 1
fi

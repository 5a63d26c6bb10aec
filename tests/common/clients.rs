//! Shared steps of the suites that drive SDK clients and real peers.
#![allow(dead_code)]

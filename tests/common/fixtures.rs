//! Shared fixtures of the hostile-input, refusal and golden suites.
#![allow(dead_code)]

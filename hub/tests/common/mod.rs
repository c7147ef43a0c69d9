//! Helpers shared by the hub's integration tests.

pub mod server;

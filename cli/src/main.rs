//! cli (being written)
fn main() {}

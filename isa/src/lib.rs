//! isa (being written)

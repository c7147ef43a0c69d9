//! engine-ref (being written)

//! Block layouts and their dequantize routines. (Being written.)

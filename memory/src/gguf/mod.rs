//! GGUF v2/v3, read zero-copy through memmap2. (Being written.)

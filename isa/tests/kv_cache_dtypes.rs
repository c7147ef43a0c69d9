//! KV caches may be F32 or F16, the key and value caches each on its own, in both row
//! forms (consecutive and paged); any other dtype is a typed error naming the cache.

use purebee_isa::ops::{Attention, CacheRows, PagedRows};
use purebee_isa::{IsaError, ProgramBuilder, U32Arg};
use purebee_memory::{DType, Registry};

/// Records KV_WRITE k, KV_WRITE v and ATTENTION over caches of `k` and `v`, consecutive or
/// paged.
fn record(k: DType, v: DType, paged: bool) -> Result<(), IsaError> {
    let mut reg = Registry::new();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let (n, hd, n_ctx) = (3, 16, 32);
    let q = b.alloc("q", DType::F32, &[n, 2 * hd])?;
    let src = b.alloc("src", DType::F32, &[n, hd])?;
    let kc = b.alloc("kc", k, &[n_ctx, hd])?;
    let vc = b.alloc("vc", v, &[n_ctx, hd])?;
    let out = b.alloc("out", DType::F32, &[n, 2 * hd])?;
    let rows = if paged {
        let pos = b.alloc("pos", DType::U32, &[n])?;
        let seq = b.alloc("seq", DType::U32, &[n])?;
        let pages = b.alloc("pages", DType::U32, &[2, 4])?;
        CacheRows::Paged(PagedRows { pos, seq, pages, page_size: 8 })
    } else {
        U32Arg::Const(0).into()
    };
    b.kv_write(kc, src, rows)?;
    b.kv_write(vc, src, rows)?;
    b.attention(Attention { out, q, k_cache: kc, v_cache: vc, head_dim: hd as u32, rows })?;
    Ok(())
}

#[test]
fn f32_and_f16_caches_in_any_mix_are_valid() {
    for paged in [false, true] {
        for k in [DType::F32, DType::F16] {
            for v in [DType::F32, DType::F16] {
                record(k, v, paged).unwrap_or_else(|e| panic!("{k} / {v} caches (paged: {paged}): {e}"));
            }
        }
    }
}

#[test]
fn other_cache_dtypes_are_refused_naming_the_cache() {
    for paged in [false, true] {
        match record(DType::BF16, DType::F16, paged) {
            Err(IsaError::DType { op: "KV_WRITE", operand: "cache", got: DType::BF16, expected, .. }) => {
                assert_eq!(expected, "F32 or F16")
            }
            other => panic!("expected a dtype error, got {other:?}"),
        }
        match record(DType::F16, DType::I8, paged) {
            Err(IsaError::DType { op: "KV_WRITE", operand: "cache", got: DType::I8, .. }) => {}
            other => panic!("expected a dtype error, got {other:?}"),
        }
    }
}

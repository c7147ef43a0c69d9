// The residual TENSOR_ADD as the epilogue of a BITLINEAR or LINEAR product (fuse/, pattern
// ResidualEpilogue), replacing product_store.wgsl after bitlinear.wgsl or linear.wgsl:
//
//     BITLINEAR(p, x, w) ; TENSOR_ADD(o, r, p)   (or TENSOR_ADD(o, p, r); or LINEAR(p, x, w))
//
// becomes one product kernel that, for each output element i, writes p[i] (unless the
// fusion pass proved that write dead: WRITE_OUT = 0) and o[i] = r[i] + p[i]. The add is the
// same one f32 addition the elementwise kernel does (f32 addition is commutative, so the
// operand order of the ISA instruction does not change a bit), and each output element is
// computed, read and written by exactly one invocation, so o may be r (in place:
// RES_INPLACE = 1, r is read from `sum` itself; binding 8 then holds a read-only stand-in,
// unread).

@group(0) @binding(8) var<storage, read> residual: array<f32>;
@group(0) @binding(9) var<storage, read_write> sum: array<f32>;

// 1 when p (the BITLINEAR's own output) must be written.
override WRITE_OUT: u32 = 1u;
// 1 when o == r (the residual is read from `sum`).
override RES_INPLACE: u32 = 0u;

fn store_out(i: u32, v: f32) {
    if (WRITE_OUT == 1u) {
        out[i] = v;
    }
    var r = 0.0;
    if (RES_INPLACE == 1u) {
        r = sum[i];
    } else {
        r = residual[i];
    }
    sum[i] = r + v;
}

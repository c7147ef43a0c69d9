// An activation and a multiply as the epilogue of the second of two BITLINEAR or LINEAR
// products of one x (fuse/, pattern ActMulEpilogue), replacing product_store.wgsl after
// bitlinear.wgsl or linear.wgsl, and elementwise_ops.wgsl:
//
//     BITLINEAR(g, h, W_g) ; BITLINEAR(u, h, W_u) ; ACT(g, g) ; ELEMENT_MUL(g, g, u)
//
// (ACT: SILU, RELU2 or GELU; the multiply's operands in either order) becomes g's product
// as usual, then one product kernel for u that, for each output
// element i, writes u[i] (unless the fusion pass proved that write dead: WRITE_OUT = 0) and
// g[i] = act(g[i]) · u[i], with the elementwise kernels' own unary_op and binary_op
// (UNARY_OP, BINARY_OP = 1), so the result is bit-identical to the unfused instructions.
// Each element of g is read and written by the one invocation that computes u[i], after g's
// product (an earlier dispatch) wrote it.

@group(0) @binding(9) var<storage, read_write> gated: array<f32>;

// 1 when u (the BITLINEAR's own output) must be written.
override WRITE_OUT: u32 = 1u;

fn store_out(i: u32, v: f32) {
    if (WRITE_OUT == 1u) {
        out[i] = v;
    }
    gated[i] = binary_op(unary_op(gated[i]), v);
}

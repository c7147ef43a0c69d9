// The plain epilogue of bitlinear.wgsl's products: output element i is written to `out`.
// (residual_add.wgsl is the other one, for the fusion pass's residual TENSOR_ADD.)
fn store_out(i: u32, v: f32) {
    out[i] = v;
}

// The plain epilogue of the product kernels (bitlinear.wgsl, linear.wgsl): output element i is
// written to `out`. (residual_add.wgsl and act_mul.wgsl are the fusion pass's.)
fn store_out(i: u32, v: f32) {
    out[i] = v;
}

// The weight that linear.wgsl's decoders read, for the kernels of one LINEAR: bindings 2
// (words) and 3 (ternary scales), `p.m` rows. (linear_multi.wgsl defines the same functions
// over several weights.)

fn wword(i: u32) -> u32 {
    return w[i];
}

fn wscale(i: u32) -> f32 {
    return ws[i];
}

fn weight_rows() -> u32 {
    return p.m;
}

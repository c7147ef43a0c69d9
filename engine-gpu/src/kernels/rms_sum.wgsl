// RMS_NORM's row scale 1 / sqrt(mean(x²) + eps), shared by rms_norm.wgsl (and norm_quant.wgsl
// after it) and by linear.wgsl's one-token products that normalize their own x (ROUND = 2),
// so that both compute it bit for bit alike: the same workgroup size (the includer's WG),
// the same order of additions, the same workgroup reduction (reduce_add_f32).
//
// The includer defines norm_src(inplace, i): element i of the row source.

fn inv_rms_of(sum_sq: f32, cols: u32, eps: f32) -> f32 {
    return inverseSqrt(sum_sq / f32(cols) + eps);
}

// This invocation's Σ v² over elements lidx, lidx + WG, ... of the row at `base` (`cols`
// long), added in that order, four loads issued together: on a GPU every load waits hundreds
// of cycles, and a loop that used each value as it came waited once per element.
fn sum_squares(inplace: bool, base: u32, lidx: u32, cols: u32) -> f32 {
    var acc = 0.0;
    var i = lidx;
    for (; i + 3u * WG < cols; i = i + 4u * WG) {
        let v = vec4<f32>(norm_src(inplace, base + i), norm_src(inplace, base + i + WG),
                          norm_src(inplace, base + i + 2u * WG), norm_src(inplace, base + i + 3u * WG));
        acc = acc + v.x * v.x;
        acc = acc + v.y * v.y;
        acc = acc + v.z * v.z;
        acc = acc + v.w * v.w;
    }
    for (; i < cols; i = i + WG) {
        let v = norm_src(inplace, base + i);
        acc = acc + v * v;
    }
    return acc;
}

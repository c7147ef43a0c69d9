//! Writing float32 `.npy` files (NPY 1.0, little-endian, C order), atomically.

use std::fs;
use std::io::Write;
use std::path::Path;

/// Writes `data` as a `[rows, cols]` float32 array. The file appears complete or not at all:
/// it is written beside the target and renamed into place.
pub fn write_f32(path: &Path, rows: usize, cols: usize, data: &[f32]) -> std::io::Result<()> {
    debug_assert_eq!(data.len(), rows * cols);
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    let padded = unpadded.div_ceil(64) * 64;
    let mut header = Vec::with_capacity(padded);
    header.extend_from_slice(b"\x93NUMPY\x01\x00");
    header.extend_from_slice(&((padded - 10) as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header.resize(padded - 1, b' ');
    header.push(b'\n');

    let tmp = path.with_extension("npy.partial");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&header)?;
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_128_bytes_for_the_fixture_shapes_and_data_follows() {
        let dir = std::env::temp_dir().join(format!("purebee-npy-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let p = dir.join("a.npy");
        write_f32(&p, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("writes");
        let b = fs::read(&p).expect("reads");
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert!(std::str::from_utf8(&b[10..10 + hlen]).expect("ascii").contains("'shape': (2, 3)"));
        assert_eq!(&b[10 + hlen..10 + hlen + 4], &1.0f32.to_le_bytes());
        assert_eq!(b.len(), 10 + hlen + 24);
        write_f32(&p, 16, 8192, &vec![0.0; 16 * 8192]).expect("writes");
        let b = fs::read(&p).expect("reads");
        assert_eq!(10 + u16::from_le_bytes([b[8], b[9]]) as usize, 128, "the fixtures' header size");
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}

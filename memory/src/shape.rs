//! Row-major tensor shapes.
//!
//! Dims are listed outermost first, as numpy and PyTorch list them: a weight matrix of
//! `n_out` rows of `n_in` contiguous elements has shape `[n_out, n_in]`. GGUF lists the
//! same dims innermost first (`ne = [n_in, n_out]`); [`Shape::from_ggml_ne`] reverses them.

use std::fmt;

/// A row-major shape: at least one dim, outermost first, the last dim contiguous.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// A shape from dims listed outermost first. Returns `None` for zero dims or an
    /// element count that overflows `usize`. Dims of size 0 are allowed (an empty tensor).
    pub fn new(dims: &[usize]) -> Option<Shape> {
        if dims.is_empty() {
            return None;
        }
        dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
        Some(Shape(dims.to_vec()))
    }

    /// A shape from GGUF / ggml dims listed innermost first (`ne0` first).
    pub fn from_ggml_ne(ne: &[usize]) -> Option<Shape> {
        let dims: Vec<usize> = ne.iter().rev().copied().collect();
        Shape::new(&dims)
    }

    /// A 1-D shape.
    pub fn vector(n: usize) -> Shape {
        Shape(vec![n])
    }

    /// A 2-D shape of `rows` rows of `cols` elements.
    pub fn matrix(rows: usize, cols: usize) -> Option<Shape> {
        Shape::new(&[rows, cols])
    }

    /// The dims, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// The dims in ggml order, innermost first.
    pub fn ggml_ne(&self) -> Vec<usize> {
        self.0.iter().rev().copied().collect()
    }

    /// Number of elements (checked not to overflow at construction).
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }

    /// The length of the contiguous last dim.
    pub fn cols(&self) -> usize {
        self.0[self.0.len() - 1]
    }

    /// The number of rows: the product of every dim but the last (1 for a vector).
    pub fn rows(&self) -> usize {
        self.0[..self.0.len() - 1].iter().product()
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cols_and_ggml_order() {
        let s = Shape::from_ggml_ne(&[256, 8192]).expect("valid");
        assert_eq!(s.dims(), &[8192, 256]);
        assert_eq!((s.rows(), s.cols(), s.numel()), (8192, 256, 8192 * 256));
        assert_eq!(s.ggml_ne(), vec![256, 8192]);
        assert_eq!(Shape::vector(7).rows(), 1);
        assert_eq!(Shape::new(&[2, 3, 5]).expect("valid").rows(), 6);
        assert_eq!(Shape::new(&[]), None);
        assert_eq!(Shape::new(&[usize::MAX, 3]), None);
        assert_eq!(s.to_string(), "[8192, 256]");
    }
}

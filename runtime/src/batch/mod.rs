//! Several sequences advanced together: a KV cache they share in pages ([`SharedCache`])
//! and a batched pass over it ([`Model::forward_batch`](crate::Model::forward_batch)) that
//! runs the next rows of every ready sequence while reading the weights once.

mod cache;
mod pass;

pub use cache::{SharedCache, PAGE_SIZE};
pub(crate) use pass::BatchForward;
pub use pass::{BatchRows, RowOutput, RowRead};

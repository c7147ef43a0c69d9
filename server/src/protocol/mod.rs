//! The JSON of the API: request fields as clients send them ([`request`]) and the
//! responses, stream chunks and usage the server writes ([`response`]).

pub mod logprobs;
pub mod request;
pub mod response;

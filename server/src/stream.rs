//! Server-sent events in OpenAI's order: the role delta (chat), content deltas (whole
//! characters, as the engine sends them, each with the log-probabilities of the tokens
//! whose text it releases when they were asked for: see `engine::LoggedToken`), the chunk with `finish_reason`, the usage chunk
//! with `"choices": []` when `stream_options.include_usage` is set, then `data: [DONE]`. An
//! error after the stream started is one `data: {"error": {...}}` event, and the stream ends.
//!
//! The response body owns the job's event receiver: when the client goes away, hyper drops
//! the body, the receiver with it, and the engine thread stops the job at its next step.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api_error::ApiError;
use crate::engine::Event;
use crate::protocol::response::{Api, Chunk, Meta};

/// Where a stream is.
enum Phase {
    /// The role delta is next (chat only).
    Opening,
    /// Relaying the engine's events.
    Relaying,
    /// Everything was sent.
    Ended,
}

struct Stream {
    meta: Meta,
    include_usage: bool,
    events: UnboundedReceiver<Event>,
    phase: Phase,
}

/// The SSE response of a started job.
pub fn response(meta: Meta, include_usage: bool, events: UnboundedReceiver<Event>) -> Response {
    let phase = if meta.api == Api::Chat { Phase::Opening } else { Phase::Relaying };
    let stream = Stream { meta, include_usage, events, phase };
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        let bytes = s.next().await?;
        Some((Ok::<Bytes, Infallible>(bytes), s))
    });
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies such as nginx would otherwise buffer the events.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

impl Stream {
    /// The next events to send; `None` once the stream has ended.
    async fn next(&mut self) -> Option<Bytes> {
        match self.phase {
            Phase::Ended => None,
            Phase::Opening => {
                self.phase = Phase::Relaying;
                Some(data(&Chunk::role(&self.meta, self.include_usage)))
            }
            Phase::Relaying => loop {
                match self.events.recv().await {
                    Some(Event::Text(text, tokens)) if !text.is_empty() => {
                        return Some(data(&Chunk::content(&self.meta, &text, &tokens, self.include_usage)))
                    }
                    Some(Event::Text(..) | Event::Started) => {}
                    Some(Event::Done(finish)) => {
                        self.phase = Phase::Ended;
                        let mut out = data(&Chunk::finish(&self.meta, &finish, self.include_usage)).to_vec();
                        if self.include_usage {
                            out.extend_from_slice(&data(&Chunk::usage(&self.meta, &finish)));
                        }
                        out.extend_from_slice(b"data: [DONE]\n\n");
                        return Some(out.into());
                    }
                    Some(Event::Failed(e)) => {
                        self.phase = Phase::Ended;
                        return Some(error_event(&e));
                    }
                    None => {
                        self.phase = Phase::Ended;
                        return Some(error_event(&ApiError::server(
                            "the engine stopped before the answer was complete",
                        )));
                    }
                }
            },
        }
    }
}

/// `data: JSON\n\n`.
fn data(chunk: &impl Serialize) -> Bytes {
    // A chunk holds strings and numbers only; serializing it cannot fail.
    let json = serde_json::to_string(chunk).unwrap_or_else(|e| ApiError::server(e.to_string()).to_json());
    format!("data: {json}\n\n").into()
}

fn error_event(e: &ApiError) -> Bytes {
    format!("data: {}\n\n", e.to_json()).into()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::{Finish, FinishReason};

    fn finish() -> Finish {
        Finish {
            reason: FinishReason::Length,
            prompt_tokens: 3,
            cached_tokens: 0,
            completion_tokens: 2,
            prompt_time: Duration::from_millis(1),
            decode_time: Duration::from_millis(1),
        }
    }

    async fn collect(api: Api, include_usage: bool, events: Vec<Event>) -> Vec<String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for e in events {
            tx.send(e).expect("receiver alive");
        }
        drop(tx);
        let phase = if api == Api::Chat { Phase::Opening } else { Phase::Relaying };
        let mut s = Stream { meta: Meta::new(api, "m"), include_usage, events: rx, phase };
        let mut out = Vec::new();
        while let Some(b) = s.next().await {
            out.extend(String::from_utf8_lossy(&b).split("\n\n").filter(|e| !e.is_empty()).map(str::to_string));
        }
        out
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().expect("a runtime")
    }

    #[test]
    fn a_chat_stream_sends_role_content_finish_usage_done() {
        let events = vec![
            Event::Text("a".into(), vec![]),
            Event::Text(String::new(), vec![]),
            Event::Text("b".into(), vec![]),
            Event::Done(finish()),
        ];
        let got = runtime().block_on(collect(Api::Chat, true, events));
        assert_eq!(got.len(), 6, "{got:#?}");
        assert!(got[0].contains(r#""delta":{"role":"assistant","content":""}"#), "{}", got[0]);
        assert!(got[1].contains(r#""delta":{"content":"a"}"#) && got[1].contains(r#""usage":null"#), "{}", got[1]);
        assert!(got[3].contains(r#""finish_reason":"length""#), "{}", got[3]);
        assert!(got[4].contains(r#""choices":[]"#) && got[4].contains(r#""completion_tokens":2"#), "{}", got[4]);
        assert_eq!(got[5], "data: [DONE]");
    }

    #[test]
    fn a_completion_stream_without_usage_has_no_role_and_no_usage_chunk() {
        let got = runtime().block_on(collect(
            Api::Completion,
            false,
            vec![Event::Text("x".into(), vec![]), Event::Done(finish())],
        ));
        assert_eq!(got.len(), 3, "{got:#?}");
        assert!(got[0].contains(r#""text":"x""#) && !got[0].contains("usage"), "{}", got[0]);
        assert!(got[1].contains(r#""finish_reason":"length""#), "{}", got[1]);
        assert_eq!(got[2], "data: [DONE]");
    }

    #[test]
    fn an_error_after_the_start_is_an_error_event_that_ends_the_stream() {
        let got = runtime().block_on(collect(Api::Chat, false, vec![Event::Text("x".into(), vec![])]));
        assert_eq!(got.len(), 3, "{got:#?}");
        assert!(got[2].starts_with(r#"data: {"error":{"code":500"#), "{}", got[2]);
        let got = runtime().block_on(collect(Api::Completion, false, vec![Event::Failed(ApiError::server("boom"))]));
        assert_eq!(got, vec![r#"data: {"error":{"code":500,"message":"boom","type":"server_error"}}"#.to_string()]);
    }
}

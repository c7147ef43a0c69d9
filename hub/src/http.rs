//! The HTTP side of a pull (ureq, blocking, rustls): the agent with its timeouts, the hub's
//! metadata request, and how a status or transport error is classified (retry or give up).

use std::time::Duration;

use ureq::Agent;

use crate::error::HubError;

/// What an attempt's failure calls for.
pub(crate) enum Failure {
    /// Retrying may help (lost or stalled connection, 5xx, 429); `progressed` when bytes
    /// arrived before it failed.
    Retry { reason: String, progressed: bool },
    /// Retrying cannot help.
    Fatal(HubError),
}

/// An agent that returns every status as a response (the caller classifies it), gives up on
/// a read that waits longer than `stall` and follows redirects unless `follow` is false.
pub(crate) fn agent(stall: Duration, connect: Duration, follow: bool) -> Agent {
    let config = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(if follow { 10 } else { 0 })
        .timeout_per_read(Some(stall))
        .timeout_connect(Some(connect))
        .user_agent(concat!("purebee-rs/", env!("CARGO_PKG_VERSION")))
        .build();
    Agent::new_with_config(config)
}

/// Classifies a status that is not a success.
pub(crate) fn status_failure(url: &str, status: u16) -> Failure {
    match status {
        404 | 410 => Failure::Fatal(HubError::NotFound { url: url.to_string() }),
        401 | 403 => Failure::Fatal(HubError::Unauthorized { url: url.to_string(), status }),
        408 | 429 | 500..=599 => {
            Failure::Retry { reason: format!("the server answered HTTP {status}"), progressed: false }
        }
        _ => Failure::Fatal(HubError::Status { url: url.to_string(), status }),
    }
}

/// Classifies an error of ureq's `call`: transport failures are worth a retry, a malformed
/// URL or a TLS setup error is not.
pub(crate) fn call_failure(url: &str, e: ureq::Error, stall: Duration) -> Failure {
    match e {
        ureq::Error::Io(e) => Failure::Retry { reason: describe_io(&e, stall), progressed: false },
        ureq::Error::Timeout(_) => {
            Failure::Retry { reason: format!("no answer for {} s", stall.as_secs_f64()), progressed: false }
        }
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Protocol(_) => {
            Failure::Retry { reason: e.to_string(), progressed: false }
        }
        other => Failure::Fatal(HubError::BadResponse { url: url.to_string(), reason: other.to_string() }),
    }
}

/// Says what a failed read means; a timeout is a stall.
pub(crate) fn describe_io(e: &std::io::Error, stall: Duration) -> String {
    let text = e.to_string();
    if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
        || text.to_lowercase().contains("timeout")
        || text.to_lowercase().contains("timed out")
    {
        format!("the download stalled (no data for {} s)", stall.as_secs_f64())
    } else {
        format!("the connection failed: {text}")
    }
}

/// A header's value as text.
pub(crate) fn header<'a>(response: &'a ureq::http::Response<ureq::Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// An ETag without its weak marker and quotes.
pub(crate) fn unquote_etag(etag: &str) -> &str {
    etag.trim().trim_start_matches("W/").trim_matches('"')
}

/// `location` (absolute, scheme-relative, or relative to `base`) as an absolute URL.
pub(crate) fn join_url(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    if let Some(l) = location.strip_prefix("//") {
        return format!("{scheme}://{l}");
    }
    let authority = rest.split('/').next().unwrap_or(rest);
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = rest.split(['?', '#']).next().unwrap_or(rest);
    let dir = path.rsplit_once('/').map_or(authority, |(d, _)| d);
    format!("{scheme}://{dir}/{location}")
}

/// `scheme://authority` of a URL.
pub(crate) fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    url[after..].find('/').map_or(url, |i| &url[..after + i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_redirect_locations() {
        let base = "http://127.0.0.1:9/o/r/resolve/main/f.gguf";
        assert_eq!(join_url(base, "/cdn/x?y=1"), "http://127.0.0.1:9/cdn/x?y=1");
        assert_eq!(join_url(base, "https://cdn.example/x"), "https://cdn.example/x");
        assert_eq!(join_url(base, "//cdn.example/x"), "http://cdn.example/x");
        assert_eq!(join_url(base, "g.gguf"), "http://127.0.0.1:9/o/r/resolve/main/g.gguf");
        assert_eq!(origin(base), "http://127.0.0.1:9");
        assert_eq!(unquote_etag("W/\"abc\""), "abc");
    }
}

//! `GET /`: the chat page. Three plain files compiled into the binary (`page/index.html`,
//! `page/page.css`, `page/page.js`), served at `/`, `/page.css` and `/page.js`; the page
//! loads nothing from anywhere else (no CDN, no web fonts), so it works offline.
//!
//! The page holds no secret, so it is served without the API key. Everything it does goes
//! through the server's own endpoints (`/v1/models`, `/v1/chat/completions`), which check
//! the key as for any client; the page asks for the key when one answers 401.
//!
//! Each file carries an `ETag` (a digest of its content) and `Cache-Control: no-cache`: a
//! browser revalidates on every load and gets a 304 while the binary is unchanged, and never
//! runs an old cached script against a new page. The page's Content-Security-Policy allows
//! scripts, styles and requests from the server itself only: a defence in depth, should
//! model text ever reach the document unescaped.

use std::sync::LazyLock;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One of the page's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asset {
    Html,
    Css,
    Js,
}

const ASSETS: [Asset; 3] = [Asset::Html, Asset::Css, Asset::Js];

/// `'self'` only; `data:` images for the page's empty favicon (which spares a 404 per load).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

impl Asset {
    fn body(self) -> &'static str {
        match self {
            Asset::Html => include_str!("../page/index.html"),
            Asset::Css => include_str!("../page/page.css"),
            Asset::Js => include_str!("../page/page.js"),
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Asset::Html => "text/html; charset=utf-8",
            Asset::Css => "text/css; charset=utf-8",
            Asset::Js => "text/javascript; charset=utf-8",
        }
    }

    /// `"<first 16 bytes of the SHA-256 of the body, in hex>"`, computed once.
    fn etag(self) -> &'static str {
        static TAGS: LazyLock<[String; 3]> = LazyLock::new(|| {
            ASSETS.map(|asset| {
                let digest = Sha256::digest(asset.body().as_bytes());
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
        });
        &TAGS[self as usize]
    }
}

pub async fn index(headers: HeaderMap) -> Response {
    serve(Asset::Html, &headers)
}

pub async fn style(headers: HeaderMap) -> Response {
    serve(Asset::Css, &headers)
}

pub async fn script(headers: HeaderMap) -> Response {
    serve(Asset::Js, &headers)
}

/// Whether the request's `If-None-Match` names `etag` (weak or strong: a proxy that
/// compressed the file may have weakened it) or is `*`.
fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |tag| {
            let tag = tag.trim();
            tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag
        },
    )
}

fn serve(asset: Asset, request: &HeaderMap) -> Response {
    let etag = asset.etag();
    let mut response = if not_modified(request, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type())], asset.body()).into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if asset == Asset::Html {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
        // Links in answers lead elsewhere: they should not tell where the chat runs.
        headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_asset_has_its_own_quoted_tag() {
        let tags = ASSETS.map(Asset::etag);
        assert!(tags.iter().all(|t| t.len() == 34 && t.starts_with('"') && t.ends_with('"')), "{tags:?}");
        assert!(tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2], "{tags:?}");
    }

    #[test]
    fn if_none_match_takes_lists_weak_tags_and_the_wildcard() {
        let etag = Asset::Js.etag();
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::IF_NONE_MATCH, value.parse().expect("a header value"));
            not_modified(&h, etag)
        };
        assert!(!not_modified(&HeaderMap::new(), etag));
        assert!(with(etag));
        assert!(with(&format!("\"other\", W/{etag}")));
        assert!(with("*"));
        assert!(!with("\"other\""));
        assert!(!with(etag.trim_matches('"')));
    }
}

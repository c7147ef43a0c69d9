//! The chat page at `/` over raw HTTP: its files with their content types and caching
//! headers, the ids the browser tests (tests/browser/serve_page.py) rely on, nothing loaded
//! from elsewhere, and the page open without the API key while the API still needs it.
//! What the page does in a browser is tested there.

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::json;

fn shared() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| TestServer::start(tiny_config()))
}

/// The committed file under server/src/page/.
fn source(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/page").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Asserts a 200 of `content_type` whose body is the committed `file`, with the headers that
/// make a browser revalidate it on each use.
fn expect_asset(r: &Response, content_type: &str, file: &str) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some(content_type));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert!(r.header("etag").is_some_and(|t| t.starts_with('"') && t.ends_with('"')), "{:?}", r.headers);
    assert!(r.text() == source(file), "the body of {file} is not the committed file");
}

#[test]
fn the_page_is_served_at_the_root_with_the_ids_the_tests_use() {
    let r = get(shared().addr, "/");
    expect_asset(&r, "text/html; charset=utf-8", "index.html");
    let html = r.text();
    for id in ["prompt", "send", "messages", "error"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id} in the page");
    }
    assert!(html.contains("<body data-busy=\"0\">"), "the body should start not busy");
    assert!(html.contains("<textarea id=\"prompt\""), "#prompt should be a textarea");
    assert!(html.contains("src=\"page.js\"") && html.contains("href=\"page.css\""), "{html}");
    let csp = r.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"), "{csp}");
}

#[test]
fn the_script_and_the_styles_are_served_with_their_content_types() {
    expect_asset(&get(shared().addr, "/page.js"), "text/javascript; charset=utf-8", "page.js");
    expect_asset(&get(shared().addr, "/page.css"), "text/css; charset=utf-8", "page.css");
}

#[test]
fn a_browser_holding_the_current_file_gets_304() {
    for path in ["/", "/page.js", "/page.css"] {
        let first = get(shared().addr, path);
        let etag = first.header("etag").unwrap_or_default().to_string();
        let again = request(shared().addr, "GET", path, &[("If-None-Match", &etag)], b"");
        assert_eq!(again.status, 304, "{path}");
        assert!(again.body.is_empty(), "{path}: {}", again.text());
        assert_eq!(again.header("etag"), Some(etag.as_str()), "{path}");
        let stale = request(shared().addr, "GET", path, &[("If-None-Match", "\"an-older-build\"")], b"");
        assert_eq!(stale.status, 200, "{path}");
    }
}

#[test]
fn the_page_loads_nothing_from_elsewhere() {
    for file in ["index.html", "page.css", "page.js"] {
        let text = source(file);
        for remote in ["://", "@import", "url(", "//cdn", "fonts.g"] {
            assert!(!text.contains(remote), "{file} contains {remote:?}: the page must work offline");
        }
    }
    // The script talks to the server by relative URLs (so a proxy may serve it under a prefix).
    let js = source("page.js");
    assert!(js.contains("fetch('v1/chat/completions'") && js.contains("fetch('v1/models'"), "the endpoints moved");
}

#[test]
fn every_element_the_script_looks_up_is_in_the_page() {
    let (html, js) = (source("index.html"), source("page.js"));
    let ids: Vec<&str> = js.split("$('").skip(1).filter_map(|rest| rest.split_once("')").map(|(id, _)| id)).collect();
    assert!(ids.len() >= 10, "{ids:?}");
    for id in ids {
        assert!(html.contains(&format!("id=\"{id}\"")), "page.js looks up #{id}, which index.html lacks");
    }
}

#[test]
fn the_page_is_open_without_the_api_key_while_the_api_needs_it() {
    let mut c = tiny_config();
    c.api_key = Some("sk-page".to_string());
    let s = TestServer::start(c);
    for path in ["/", "/page.js", "/page.css", "/v1/models"] {
        assert_eq!(get(s.addr, path).status, 200, "{path} should be open");
    }
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).to_string();
    let path = "/v1/chat/completions";
    let json = ("Content-Type", "application/json");
    request(s.addr, "POST", path, &[json], body.as_bytes()).expect_error(
        401,
        "authentication_error",
        "missing API key",
    );
    let keyed = request(s.addr, "POST", path, &[json, ("Authorization", "Bearer sk-page")], body.as_bytes());
    assert_eq!(keyed.status, 200, "{}", keyed.text());
}

#[test]
fn only_get_is_answered_and_other_paths_stay_404() {
    request(shared().addr, "POST", "/", &[], b"").expect_error(405, "invalid_request_error", "POST");
    get(shared().addr, "/index.html").expect_error(404, "not_found_error", "/index.html");
}

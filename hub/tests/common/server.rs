//! A small HTTP/1.1 server on loopback for the pull tests (the hub's and the cli's): it
//! serves byte ranges and, request by request, can drop the connection in the middle of a
//! body, stall, ignore `Range`, send a wrong body or answer an error status. It mimics the
//! Hugging Face hub's `/OWNER/REPO/resolve/REV/FILE`: a 302 to a CDN-like path with
//! `X-Linked-Etag`, `X-Repo-Commit` and `X-Linked-Size`. Every request is logged. Dropping
//! the server stops it and releases stalled connections; each connection has a 5 s read
//! timeout and a stall lasts at most 10 s, so nothing outlives a test for long.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the server does wrong on one request to a route.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Sends the headers and this many body bytes, then closes the connection.
    DropAfter(usize),
    /// Sends the headers and this many body bytes, then sends nothing more (until the
    /// server is dropped).
    StallAfter(usize),
    /// Answers 200 with the whole body whatever `Range` asked.
    IgnoreRange,
    /// Sends a body of the right length with other bytes.
    WrongBody,
    /// Answers this status with an empty body.
    Status(u16),
}

/// One logged request.
#[derive(Clone, Debug)]
pub struct Logged {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path, query included.
    pub path: String,
    /// The `Range` header.
    pub range: Option<String>,
    /// The status answered.
    pub status: u16,
}

struct Route {
    body: Vec<u8>,
    faults: VecDeque<Fault>,
    redirect: Option<(String, Vec<(String, String)>)>,
}

#[derive(Default)]
struct Shared {
    routes: Mutex<HashMap<String, Route>>,
    log: Mutex<Vec<Logged>>,
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// The server.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server on a free loopback port.
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if *s.stopped.lock().expect("lock") {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || handle(stream, &s));
            }
        });
        TestServer { addr, shared, accept: Some(accept) }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Serves `body` at `path`, with `faults` applied to its next requests in turn.
    pub fn serve(&self, path: &str, body: Vec<u8>, faults: Vec<Fault>) {
        let route = Route { body, faults: faults.into(), redirect: None };
        self.shared.routes.lock().expect("lock").insert(path.to_string(), route);
    }

    /// Serves a hub file: `/OWNER/REPO/resolve/REV/FILE` redirects (302) to `/cdn/<sha256>`
    /// with the hub's headers; the CDN path serves `body` with `cdn_faults`. `etag` is the
    /// digest the hub announces (the body's when `None`). Returns the announced digest.
    #[allow(clippy::too_many_arguments)] // one per thing the hub announces, named at each call
    pub fn hub_file(
        &self,
        repo: &str,
        rev: &str,
        file: &str,
        commit: &str,
        body: Vec<u8>,
        etag: Option<&str>,
        cdn_faults: Vec<Fault>,
    ) -> String {
        let sha = etag.map_or_else(|| sha256_hex(&body), str::to_string);
        let cdn = format!("/cdn/{sha}");
        let headers = vec![
            ("X-Linked-Etag".to_string(), format!("\"{sha}\"")),
            ("X-Repo-Commit".to_string(), commit.to_string()),
            ("X-Linked-Size".to_string(), body.len().to_string()),
            ("ETag".to_string(), "W/\"0123456789abcdef0123456789abcdef01234567\"".to_string()),
        ];
        let resolve = Route {
            body: Vec::new(),
            faults: VecDeque::new(),
            redirect: Some((format!("{cdn}?sig=test&expires=1"), headers)),
        };
        let mut routes = self.shared.routes.lock().expect("lock");
        routes.insert(format!("/{repo}/resolve/{rev}/{file}"), resolve);
        routes.insert(cdn, Route { body, faults: cdn_faults.into(), redirect: None });
        sha
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.shared.log.lock().expect("lock").clone()
    }

    /// The GET requests whose path starts with `prefix`.
    pub fn gets(&self, prefix: &str) -> Vec<Logged> {
        self.requests().into_iter().filter(|r| r.method == "GET" && r.path.starts_with(prefix)).collect()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        *self.shared.stopped.lock().expect("lock") = true;
        self.shared.wake.notify_all();
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// The sha256 of `bytes` in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    purebee_hub::Sha256Digest::of(bytes).to_string()
}

/// `n` bytes of a fixed pseudo-random pattern.
pub fn test_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn handle(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let range = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("range"))
        .map(|(_, v)| v.trim().to_string());
    let route_path = path.split('?').next().unwrap_or("").to_string();

    let (status, headers, body, fault) = {
        let mut routes = shared.routes.lock().expect("lock");
        match routes.get_mut(&route_path) {
            None => (404, Vec::new(), Vec::new(), None),
            Some(route) => {
                let fault = route.faults.pop_front();
                match (&route.redirect, &fault) {
                    (_, Some(Fault::Status(code))) => (*code, Vec::new(), Vec::new(), None),
                    (Some((location, hdrs)), _) => {
                        let mut h = hdrs.clone();
                        h.push(("Location".to_string(), location.clone()));
                        (302, h, Vec::new(), None)
                    }
                    (None, _) => {
                        let mut body = route.body.clone();
                        if matches!(fault, Some(Fault::WrongBody)) {
                            body.iter_mut().for_each(|b| *b = b.wrapping_add(1));
                        }
                        let len = body.len();
                        let start = range
                            .as_deref()
                            .filter(|_| !matches!(fault, Some(Fault::IgnoreRange)))
                            .and_then(|r| r.strip_prefix("bytes="))
                            .and_then(|r| r.strip_suffix('-'))
                            .and_then(|n| n.parse::<usize>().ok());
                        let accept = ("Accept-Ranges".to_string(), "bytes".to_string());
                        match start {
                            Some(s) if s >= len => {
                                (416, vec![("Content-Range".to_string(), format!("bytes */{len}"))], Vec::new(), None)
                            }
                            Some(s) => {
                                let cr = ("Content-Range".to_string(), format!("bytes {s}-{}/{len}", len - 1));
                                (206, vec![accept, cr], body[s..].to_vec(), fault)
                            }
                            None => (200, vec![accept], body, fault),
                        }
                    }
                }
            }
        }
    };
    shared.log.lock().expect("lock").push(Logged { method: method.clone(), path, range, status });

    let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in &headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    if stream.write_all(out.as_bytes()).is_err() || method == "HEAD" {
        return;
    }
    match fault {
        Some(Fault::DropAfter(n)) => {
            let _ = stream.write_all(&body[..n.min(body.len())]);
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Fault::StallAfter(n)) => {
            let _ = stream.write_all(&body[..n.min(body.len())]);
            let _ = stream.flush();
            let stopped = shared.stopped.lock().expect("lock");
            let _ = shared.wake.wait_timeout_while(stopped, Duration::from_secs(10), |s| !*s);
        }
        _ => {
            let _ = stream.write_all(&body);
            let _ = stream.flush();
        }
    }
}

/// Every file under a store's folder `dir` (relative paths, sorted), `.locks` left out.
pub fn store_files(dir: &std::path::Path) -> Vec<String> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).expect("under root").to_string_lossy().into_owned();
            if rel.starts_with(".locks") {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

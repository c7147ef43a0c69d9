//! Test helpers: a server started in-process on an ephemeral loopback port, and a minimal
//! HTTP/1.1 client over `TcpStream` (so a test controls every byte it sends and can drop a
//! connection at any point). Every wait is bounded.

#![allow(dead_code)] // each test file uses its own part of the helpers

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use purebee_loader::{EngineChoice, EngineSpec};
use purebee_server::{Server, ServerConfig};
use serde_json::Value;

/// How long any single wait in these tests may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The tiny BitNet fixture (random weights: gibberish, but deterministic).
pub fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny/tiny_b158_i2_s.gguf")
}

/// Settings for the tiny model on the reference engine (deterministic), on a free port.
pub fn tiny_config() -> ServerConfig {
    let mut c = ServerConfig::new(tiny_model());
    c.port = 0;
    c.parallel = 1;
    c.n_ctx = 4096;
    c.engine = EngineSpec { choice: EngineChoice::Ref, ..EngineSpec::default() };
    c
}

/// A started server whose model is loaded; shut down when dropped.
pub struct TestServer {
    pub server: Server,
    pub addr: SocketAddr,
}

impl TestServer {
    /// Starts `config` and waits until `/health` answers 200.
    pub fn start(config: ServerConfig) -> TestServer {
        let server = Server::start(config).expect("the server starts");
        let addr = server.local_addr();
        let ready = wait_until(|| get(addr, "/health").status == 200);
        assert!(ready, "the model did not load within {TIMEOUT:?}");
        TestServer { server, addr }
    }

    /// The value of a metric sample (`name` with its labels, as written in /metrics).
    pub fn metric(&self, sample: &str) -> f64 {
        metric(self.addr, sample)
    }
}

/// The value of `sample` in `addr`'s /metrics.
pub fn metric(addr: SocketAddr, sample: &str) -> f64 {
    let text = get(addr, "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {sample} in /metrics:\n{text}"))
}

/// Polls `condition` every 20 ms until it holds (true) or [`TIMEOUT`] passes (false).
pub fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < TIMEOUT {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A whole HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Asserts an error answer: its status, its `type`, and that its message mentions
    /// `mentions`; returns the error object.
    pub fn expect_error(&self, status: u16, kind: &str, mentions: &str) -> Value {
        let v = self.json();
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(v["error"]["code"], status, "{}", self.text());
        assert_eq!(v["error"]["type"], kind, "{}", self.text());
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(mentions), "the message should mention {mentions:?}: {message}");
        v["error"].clone()
    }

    /// The events of an SSE body (`data: ` stripped).
    pub fn events(&self) -> Vec<String> {
        split_events(&self.text())
    }
}

fn split_events(text: &str) -> Vec<String> {
    text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).map(str::to_string).collect()
}

/// Connects to `addr` with read and write timeouts.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    s.set_write_timeout(Some(TIMEOUT)).expect("write timeout");
    s
}

/// Writes a request with `Connection: close`; a write the server cut short (it answered
/// before reading the whole body) is not an error.
pub fn send(stream: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(body));
}

/// Sends a request and reads the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let mut stream = connect(addr);
    send(&mut stream, method, path, headers, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let chunked = headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(chunk) = read_chunk(&mut reader) {
            body.extend(chunk);
        }
    } else {
        reader.read_to_end(&mut body).expect("read the body");
    }
    Response { status, headers, body }
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"")
}

pub fn post(addr: SocketAddr, path: &str, body: &[u8]) -> Response {
    request(addr, "POST", path, &[("Content-Type", "application/json")], body)
}

pub fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Response {
    post(addr, path, body.to_string().as_bytes())
}

fn read_head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("read the status line");
    let status =
        line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("read a header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    (status, headers)
}

/// The next chunk of a chunked body; `None` at its end (or when the connection closed).
fn read_chunk(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    if size == 0 {
        return None;
    }
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data).ok()?;
    data.truncate(size);
    Some(data)
}

/// A streaming response read event by event; dropping it closes the connection.
pub struct EventStream {
    reader: BufReader<TcpStream>,
    pub status: u16,
    pending: String,
    ended: bool,
}

impl EventStream {
    /// Sends a streaming POST and reads the response head (which comes once the request has
    /// a slot).
    pub fn open(addr: SocketAddr, path: &str, body: &Value) -> EventStream {
        let mut stream = EventStream::send(addr, path, body);
        stream.read_head();
        stream
    }

    /// Sends a streaming POST without reading anything back.
    pub fn send(addr: SocketAddr, path: &str, body: &Value) -> EventStream {
        let mut stream = connect(addr);
        send(&mut stream, "POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes());
        EventStream { reader: BufReader::new(stream), status: 0, pending: String::new(), ended: false }
    }

    /// Reads the response head.
    pub fn read_head(&mut self) {
        let (status, _) = read_head(&mut self.reader);
        self.status = status;
    }

    /// The next event's data, `None` at the end of the stream.
    pub fn next_event(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.pending.find("\n\n") {
                let event: String = self.pending.drain(..at + 2).collect();
                if let Some(data) = event.trim_end().strip_prefix("data: ") {
                    return Some(data.to_string());
                }
                continue;
            }
            if self.ended {
                return None;
            }
            match read_chunk(&mut self.reader) {
                Some(chunk) => self.pending.push_str(&String::from_utf8_lossy(&chunk)),
                None => self.ended = true,
            }
        }
    }

    /// Every remaining event.
    pub fn rest(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_event()).collect()
    }
}

/// The text of a stream's events (chat deltas or completion texts).
pub fn streamed_text(events: &[String]) -> String {
    events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            let c = &v["choices"][0];
            c["delta"]["content"].as_str().or(c["text"].as_str()).map(str::to_string)
        })
        .collect()
}

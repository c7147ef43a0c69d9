//! Starting and stopping: the listener bound at once (port 0 picks a free port, said on
//! stderr), the model loaded on the engine thread meanwhile, and a graceful shutdown that
//! stops accepting, ends open streams with their final chunks and waits for them.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use purebee_loader::{ModelFile, ModelSource};
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle as TaskHandle;

use crate::auth::ApiKey;
use crate::engine::Submitter;
use crate::metrics::Metrics;
use crate::protocol::response::unix_time;
use crate::state::AppState;
use crate::{load, routes, ServerConfig, ServerError};

/// How long connections may stay open after a shutdown began, before they are closed
/// (a client that stops reading must not keep the process alive).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running server.
pub struct Server {
    addr: SocketAddr,
    runtime: Option<Runtime>,
    serve: Option<TaskHandle<()>>,
    engine: Option<JoinHandle<Result<(), ServerError>>>,
    shutdown: Arc<Shutdown>,
}

/// Starts a shutdown from anywhere: the HTTP side stops accepting, the engine thread ends
/// every job.
struct Shutdown {
    begun: watch::Sender<bool>,
    submitter: Submitter,
}

impl Shutdown {
    fn begin(&self) {
        self.begun.send_replace(true);
        self.submitter.shutdown();
    }
}

impl Server {
    /// Checks `config`, maps the model file, binds the address (saying on stderr
    /// `purebee-rs: listening on http://ADDR`) and returns while the model loads on the
    /// engine thread; `/health` answers 503 until it is loaded.
    pub fn start(config: ServerConfig) -> Result<Server, ServerError> {
        check(&config)?;
        let file = ModelFile::open(ModelSource::Path(&config.model_path), &config.engine)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("purebee-http")
            .enable_all()
            .build()
            .map_err(|source| ServerError::Io { what: "starting the tokio runtime", source })?;
        let address = format!("{}:{}", config.host, config.port);
        let bind_error = |source| ServerError::Bind { address: address.clone(), source };
        let listener = std::net::TcpListener::bind((config.host.as_str(), config.port)).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let listener = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(bind_error)?
        };
        // Connections wait in the listener's backlog until the router serves them just below.
        eprintln!("purebee-rs: listening on http://{addr}");

        let max_body_bytes = config.max_body_bytes;
        let metrics = Arc::new(Metrics::default());
        let (commands, receiver) = mpsc::channel();
        let submitter = Submitter::new(commands, Arc::clone(&metrics), config.parallel, config.max_queue);
        let state = Arc::new(AppState {
            model_id: config.model_id(),
            api_key: config.api_key.as_deref().map(ApiKey::new),
            metrics,
            ready: OnceLock::new(),
            started: unix_time(),
        });
        let (begun, _) = watch::channel(false);
        let shutdown = Arc::new(Shutdown { begun, submitter: submitter.clone() });

        let engine = {
            let (state, shutdown) = (Arc::clone(&state), Arc::clone(&shutdown));
            std::thread::Builder::new()
                .name("purebee-engine".to_string())
                .spawn(move || {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        load::load_and_serve(&config, file, &state, submitter, receiver)
                    }))
                    .unwrap_or(Err(ServerError::Panicked("engine")));
                    if let Err(e) = &result {
                        // Without a model or an engine thread the server cannot answer: stop.
                        eprintln!("purebee-rs: error: {e}");
                        shutdown.begin();
                    }
                    result
                })
                .map_err(|source| ServerError::Io { what: "starting the engine thread", source })?
        };

        let app = routes::router(state, max_body_bytes);
        let serve = runtime.spawn(serve(listener, app, shutdown.begun.subscribe()));
        Ok(Server { addr, runtime: Some(runtime), serve: Some(serve), engine: Some(engine), shutdown })
    }

    /// The address the server listens on (the actual port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Begins a graceful shutdown: no new connections; running generations end now with
    /// their final chunks; queued requests get 503. [`Server::wait`] returns once every
    /// connection closed.
    pub fn shutdown(&self) {
        self.shutdown.begin();
    }

    /// Begins a graceful shutdown on SIGTERM or SIGINT (the handlers are installed before
    /// this returns).
    pub fn shutdown_on_signals(&self) -> Result<(), ServerError> {
        use tokio::signal::unix::{signal, SignalKind};
        let Some(runtime) = &self.runtime else { return Ok(()) };
        let _in_runtime = runtime.enter();
        let io = |what| move |source| ServerError::Io { what, source };
        let mut term = signal(SignalKind::terminate()).map_err(io("installing the SIGTERM handler"))?;
        let mut int = signal(SignalKind::interrupt()).map_err(io("installing the SIGINT handler"))?;
        let shutdown = Arc::clone(&self.shutdown);
        runtime.spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            eprintln!("purebee-rs: {name}: shutting down (open streams are ended)");
            shutdown.begin();
        });
        Ok(())
    }

    /// Blocks until the server has stopped (after [`Server::shutdown`], a signal, or a
    /// failure to load the model, which is returned).
    pub fn wait(mut self) -> Result<(), ServerError> {
        let serve = match (&self.runtime, self.serve.take()) {
            (Some(runtime), Some(task)) => runtime.block_on(task).map_err(|_| ServerError::Panicked("HTTP")),
            _ => Ok(()),
        };
        let engine = match self.engine.take() {
            Some(thread) => thread.join().unwrap_or(Err(ServerError::Panicked("engine"))),
            None => Ok(()),
        };
        engine.and(serve)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.begin();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Serves until a shutdown begins and every connection closed, or the grace period ran out.
async fn serve(listener: tokio::net::TcpListener, app: axum::Router, begun: watch::Receiver<bool>) {
    let mut graceful = begun.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = graceful.wait_for(|b| *b).await;
    });
    let mut deadline = begun;
    tokio::select! {
        result = server.into_future() => {
            if let Err(e) = result {
                eprintln!("purebee-rs: error: serving HTTP: {e}");
            }
        }
        _ = async move {
            let _ = deadline.wait_for(|b| *b).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => eprintln!("purebee-rs: connections still open {} s after the shutdown began; closing them", SHUTDOWN_GRACE.as_secs()),
    }
}

/// Refuses settings that cannot work, naming the flag.
fn check(config: &ServerConfig) -> Result<(), ServerError> {
    let bad = |flag, value: usize, reason: &str| {
        Err(ServerError::Config { flag, value: value.to_string(), reason: reason.to_string() })
    };
    if config.parallel == 0 {
        return bad("--parallel", 0, "at least one slot is needed");
    }
    if config.ubatch == 0 {
        return bad("--ubatch-size", 0, "a pass needs at least one token");
    }
    if config.batch == 0 {
        return bad("--batch-size", 0, "a pass needs at least one token");
    }
    if config.max_body_bytes == 0 {
        return bad("body limit", 0, "must be at least 1 byte");
    }
    Ok(())
}

//! The device: adapter choice, its real limits (or WebGPU's defaults), optional features,
//! and error capture.
//!
//! Creating one is asynchronous ([`GpuContext::new_async`]): a browser tab cannot block on
//! the GPU, so there the future is awaited by the page's executor; natively
//! [`GpuContext::new`] blocks on it with `pollster`. Nothing in a browser ever waits:
//! [`GpuContext::wait`] is [`GpuError::WouldBlock`] there.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
#[cfg(not(target_arch = "wasm32"))]
use std::time::{Duration, Instant};

use crate::GpuError;

/// How long [`GpuContext::wait_mapped`] polls for a mapping's callback.
#[cfg(not(target_arch = "wasm32"))]
const MAP_WAIT: Duration = Duration::from_secs(60);

/// Whether this build may block on the GPU: natively yes; in a browser tab (wasm32) no, since
/// a mapping resolves only when the page's event loop runs, after the Rust call returns.
pub(crate) const CAN_WAIT: bool = !cfg!(target_arch = "wasm32");

/// The variables with which a user configures Mesa's Vulkan device selection.
const DEVICE_SELECT_VARS: [&str; 4] =
    ["NODEVICE_SELECT", "MESA_VK_DEVICE_SELECT", "MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE", "DRI_PRIME"];

/// Keeps adapter probing from opening display connections: call it first thing in `main`,
/// before any thread starts (it sets an environment variable of this process).
///
/// Mesa's Vulkan device selection (its implicit `device_select` module, loaded wherever
/// Mesa is installed) picks a default GPU by connecting to the Wayland and X11 displays whenever the instance
/// enables their surface extensions, which wgpu's Vulkan backend always does. Without
/// `XDG_RUNTIME_DIR`, libwayland then prints `error: XDG_RUNTIME_DIR is invalid or not set
/// in the environment.` on every probe; with a remote `DISPLAY`, it waits on the network. A
/// compute engine has no surface, and [`GpuContext::new`] ranks every adapter itself (the
/// device selection only reorders them), so unless the user configures it (any of
/// `NODEVICE_SELECT`, `MESA_VK_DEVICE_SELECT`, `MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE`,
/// `DRI_PRIME` set), this turns it off for the process with its own switch,
/// `NODEVICE_SELECT=1`. Returns whether it did.
pub fn quiet_display_probing() -> bool {
    // A browser has no environment to set (and no Mesa).
    if cfg!(target_arch = "wasm32") || DEVICE_SELECT_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        return false;
    }
    std::env::set_var("NODEVICE_SELECT", "1");
    true
}

/// How to pick and configure the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    /// Accept a CPU adapter (Mesa's lavapipe) when no GPU exists. Tests and CI set it;
    /// `--engine auto` does not, since the reference engine is the better CPU path there.
    pub allow_cpu_adapter: bool,
    /// Use subgroup operations when the adapter has them. `false` forces the portable
    /// kernels (as does the environment variable `PUREBEE_GPU_PORTABLE=1`).
    pub use_subgroups: bool,
    /// Caps the bytes one binding may address below the adapter's limit. Tensors larger than
    /// a binding are bound as row windows; tests set a small cap to exercise that path
    /// without allocating hundreds of megabytes.
    pub max_binding: Option<u64>,
    /// Caps the bytes of one buffer below the device's `max_buffer_size` (rounded down to
    /// whole words). A tensor part larger than a buffer is stored as several buffers of whole
    /// row windows (shards, see `tensors.rs`); tests set a small cap to exercise that path.
    /// The binding size is capped by it too.
    pub max_buffer: Option<u64>,
    /// Request WebGPU's default limits (`wgpu::Limits::default()`: 128 MiB per storage
    /// binding, 256 MiB per buffer, 8 storage buffers per stage, ...; lowered where the
    /// adapter has less) instead of the adapter's own, as a page that asks for nothing more
    /// gets them. Off by default, natively and in a browser; the environment variable
    /// `PUREBEE_GPU_DEFAULT_LIMITS=1` turns it on (natively), to check that programs and
    /// their tensors run within them.
    pub default_limits: bool,
    /// Run the compiler's fusion pass (`fuse/`): fused kernels for the patterns it
    /// matches. `false` compiles every instruction to its own kernels (as does the
    /// environment variable `PUREBEE_GPU_NO_FUSE=1`); tests compare the two.
    pub fuse: bool,
    /// Choose kernels as for a GPU even on a CPU adapter (`Capabilities::cpu` false): tests
    /// run the forms only a GPU takes (`gemv` on short rows, the products that round their
    /// own x) on lavapipe. The environment variable `PUREBEE_GPU_KERNELS_AS_GPU=1` does the
    /// same (to count a GPU's dispatches with `bench` on lavapipe).
    pub gpu_kernels: bool,
    /// The fused norms (`norm_quant.wgsl`) take rows of up to 32 elements per invocation in
    /// two rounds of loads, each invocation's share held in registers, instead of their
    /// loops: a kernel variant to compare on a GPU, off by default (the environment
    /// variable `PUREBEE_GPU_HELD_NORM=1` turns it on). The same bits either way.
    pub held_norm: bool,
}

impl Default for GpuOptions {
    fn default() -> GpuOptions {
        GpuOptions {
            allow_cpu_adapter: true,
            use_subgroups: true,
            max_binding: None,
            max_buffer: None,
            default_limits: false,
            fuse: true,
            gpu_kernels: false,
            held_norm: false,
        }
    }
}

/// Optional capabilities the kernels may use, after the adapter check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Subgroup operations (`subgroupAdd`, ...) are enabled.
    pub subgroups: bool,
    /// The adapter's smallest subgroup size (when subgroups are enabled).
    pub min_subgroup_size: u32,
    /// Timestamp queries at compute pass boundaries are enabled (`bench --profile` times
    /// kernels with them; nothing else uses them).
    pub timestamps: bool,
    /// The adapter is a CPU (Mesa's lavapipe): its invocations are CPU threads, so kernels
    /// that give each invocation a longer serial share win there and lose on a GPU. It also
    /// rounds every WGSL float operation as written, where a GPU driver may contract
    /// `a · b + c` into one fused multiply-add (SPIR-V allows it wherever `NoContraction` is
    /// absent, and naga never sets it) and decide differently in two shaders doing the same
    /// arithmetic. False on a CPU adapter under `GpuOptions::gpu_kernels`.
    pub cpu: bool,
    /// `GpuOptions::held_norm` (or `PUREBEE_GPU_HELD_NORM=1`): the fused norms' held-row
    /// variant.
    pub held_norm: bool,
}

/// An open device, its queue, and what the adapter allows.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) caps: Capabilities,
    /// `GpuOptions::max_binding`.
    binding_cap: Option<u64>,
    /// `GpuOptions::max_buffer`.
    buffer_cap: Option<u64>,
    /// `GpuOptions::fuse`, unless `PUREBEE_GPU_NO_FUSE=1`.
    pub(crate) fuse: bool,
    /// `PUREBEE_GPU_POISON_WORKGROUP=1`: every shader module's workgroup variables are filled
    /// with a poison pattern before each entry point runs (`poison.rs`), so that tests catch
    /// a kernel reading workgroup memory it has not written (pipelines do not zero it).
    pub(crate) poison_workgroup: bool,
    /// Validation, out-of-memory and device-lost errors, collected instead of panicking.
    errors: Arc<Mutex<Vec<String>>>,
}

impl GpuContext {
    /// Opens the best adapter: a discrete GPU, else an integrated or virtual one, else (when
    /// allowed) a CPU adapter. Requests the adapter's own limits, not WebGPU's defaults
    /// (unless [`GpuOptions::default_limits`]). Blocks on [`GpuContext::new_async`]; not in a
    /// browser, where only the async constructor exists.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(options: &GpuOptions) -> Result<GpuContext, GpuError> {
        pollster::block_on(GpuContext::new_async(options))
    }

    /// [`GpuContext::new`] as a future: the constructor for a browser tab, whose page awaits
    /// it (`wasm_bindgen_futures`). There the adapter is the one `navigator.gpu` gives for
    /// high performance (a page cannot enumerate adapters), and the portable kernels are
    /// used (the browser's WGSL would need `enable subgroups;`, which naga rejects, and
    /// WebGPU's subgroups have no `subgroup_id`); no timestamp queries are requested.
    pub async fn new_async(options: &GpuOptions) -> Result<GpuContext, GpuError> {
        let adapter = choose_adapter(options).await?;
        let info = adapter.get_info();
        let default_limits = options.default_limits || env_on("PUREBEE_GPU_DEFAULT_LIMITS");
        let limits = if default_limits {
            // Lowered where the adapter has less (a GL adapter may), so the request succeeds.
            wgpu::Limits::default().or_worse_values_from(&adapter.limits())
        } else {
            adapter.limits()
        };
        let portable = cfg!(target_arch = "wasm32") || env_on("PUREBEE_GPU_PORTABLE");
        let subgroups = options.use_subgroups && !portable && adapter.features().contains(wgpu::Features::SUBGROUP);
        let mut features = wgpu::Features::empty();
        if subgroups {
            features |= wgpu::Features::SUBGROUP;
        }
        // Requested only where the adapter has them; costs nothing until a profile uses them.
        // `PUREBEE_GPU_NO_TIMESTAMPS=1` acts as an adapter without them (for tests).
        // In a browser a timed profile would have to wait for its timestamps: not requested.
        let no_timestamps = cfg!(target_arch = "wasm32") || env_on("PUREBEE_GPU_NO_TIMESTAMPS");
        let timestamps = !no_timestamps && adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        if timestamps {
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("purebee"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| GpuError::Device { adapter: info.name.clone(), reason: e.to_string() })?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let sink = errors.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut v) = sink.lock() {
                v.push(format!("device lost ({reason:?}): {message}"));
            }
        });
        let gpu_kernels = options.gpu_kernels || env_on("PUREBEE_GPU_KERNELS_AS_GPU");
        let caps = Capabilities {
            subgroups,
            min_subgroup_size: if subgroups { info.subgroup_min_size } else { 0 },
            timestamps,
            cpu: info.device_type == wgpu::DeviceType::Cpu && !gpu_kernels,
            held_norm: options.held_norm || env_on("PUREBEE_GPU_HELD_NORM"),
        };
        let fuse = options.fuse && !env_on("PUREBEE_GPU_NO_FUSE");
        let poison_workgroup = env_on("PUREBEE_GPU_POISON_WORKGROUP");
        Ok(GpuContext {
            device,
            queue,
            info,
            limits,
            caps,
            binding_cap: options.max_binding,
            buffer_cap: options.max_buffer,
            fuse,
            poison_workgroup,
            errors,
        })
    }

    /// The adapter's name, backend and type, for messages.
    pub fn describe(&self) -> String {
        format!("{} ({:?}, {:?})", self.info.name, self.info.backend, self.info.device_type)
    }

    /// The capabilities the kernels use.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// The largest buffer the engine creates: the device's `max_buffer_size` or
    /// `GpuOptions::max_buffer`, in whole words (a tensor part larger than this is stored in
    /// shards; one larger than a binding is bound as several windows).
    pub(crate) fn max_buffer(&self) -> u64 {
        let limit = self.buffer_cap.map_or(self.limits.max_buffer_size, |cap| cap.min(self.limits.max_buffer_size));
        limit / 4 * 4
    }

    /// The largest buffer one binding may address (at most [`GpuContext::max_buffer`]).
    pub(crate) fn max_binding(&self) -> u64 {
        let limit = self.limits.max_storage_buffer_binding_size.min(self.max_buffer());
        self.binding_cap.map_or(limit, |cap| cap.min(limit))
    }

    /// The limits the device was created with.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// Fails with the first error wgpu reported since the last check.
    pub(crate) fn check(&self) -> Result<(), GpuError> {
        let mut v = self.errors.lock().map_err(|_| GpuError::Wgpu("error log poisoned".to_string()))?;
        if v.is_empty() {
            return Ok(());
        }
        let first = v.remove(0);
        v.clear();
        Err(GpuError::Wgpu(first))
    }

    /// Waits for every submitted command to finish; in a browser, where nothing may wait,
    /// [`GpuError::WouldBlock`] naming `op`.
    pub(crate) fn wait(&self, op: &'static str) -> Result<(), GpuError> {
        if !CAN_WAIT {
            return Err(GpuError::WouldBlock { op });
        }
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| GpuError::Wgpu(e.to_string()))?;
        self.check()
    }

    /// Lets the device make progress without waiting, so that mapping callbacks whose
    /// commands have finished run (natively; a browser runs them from its event loop).
    pub(crate) fn poll(&self) -> Result<(), GpuError> {
        if CAN_WAIT {
            self.device.poll(wgpu::PollType::Poll).map_err(|e| GpuError::Wgpu(e.to_string()))?;
        }
        Ok(())
    }

    /// After a wait for the submission that a `map_async` follows, its callback's result
    /// (`what` names the buffer in errors). The callback normally ran in that wait; if not,
    /// the device is polled (without blocking) until it runs, and after [`MAP_WAIT`] it is a
    /// typed error rather than a hang (a blocking `recv` would wait forever).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_mapped(
        &self,
        mapped: &Receiver<Result<(), wgpu::BufferAsyncError>>,
        what: &str,
    ) -> Result<(), GpuError> {
        let start = Instant::now();
        loop {
            match mapped.try_recv() {
                Ok(r) => return r.map_err(|e| GpuError::Wgpu(format!("mapping {what} for reading: {e}"))),
                Err(TryRecvError::Disconnected) => {
                    return Err(GpuError::Wgpu(format!("mapping {what} for reading: the callback was dropped")))
                }
                Err(TryRecvError::Empty) if start.elapsed() > MAP_WAIT => {
                    return Err(GpuError::Wgpu(format!(
                        "mapping {what} for reading: not done {} s after its commands finished",
                        MAP_WAIT.as_secs()
                    )))
                }
                Err(TryRecvError::Empty) => {
                    self.device.poll(wgpu::PollType::Poll).map_err(|e| GpuError::Wgpu(e.to_string()))?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

/// In a browser, which cannot wait: a mapping callback's result if it has run, else
/// [`GpuError::WouldBlock`] (`what` names the buffer in errors).
#[cfg(target_arch = "wasm32")]
impl GpuContext {
    pub(crate) fn wait_mapped(
        &self,
        mapped: &Receiver<Result<(), wgpu::BufferAsyncError>>,
        what: &str,
    ) -> Result<(), GpuError> {
        match mapped.try_recv() {
            Ok(r) => r.map_err(|e| GpuError::Wgpu(format!("mapping {what} for reading: {e}"))),
            Err(TryRecvError::Disconnected) => {
                Err(GpuError::Wgpu(format!("mapping {what} for reading: the callback was dropped")))
            }
            Err(TryRecvError::Empty) => Err(GpuError::WouldBlock { op: "mapping a buffer for reading" }),
        }
    }
}

/// Whether environment variable `name` is `1` (never in a browser, which has none).
fn env_on(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// Natively: every adapter of Vulkan, Metal and DX12 (GL only when none of them has one),
/// the best by [`rank`] among those `options` allow.
#[cfg(not(target_arch = "wasm32"))]
async fn choose_adapter(options: &GpuOptions) -> Result<wgpu::Adapter, GpuError> {
    // GL only when none of the others has an adapter (GL is the slowest backend for compute,
    // and probing it opens display connections).
    let adapters_of = |backends: wgpu::Backends| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends &= backends;
        wgpu::Instance::new(desc).enumerate_adapters(backends)
    };
    let mut adapters = adapters_of(wgpu::Backends::PRIMARY).await;
    if adapters.is_empty() {
        adapters = adapters_of(wgpu::Backends::GL).await;
    }
    adapters
        .into_iter()
        .filter(|a| allowed(options, a))
        .min_by_key(|a| (rank(a), a.get_info().backend != wgpu::Backend::Vulkan))
        .ok_or(GpuError::NoAdapter)
}

/// In a browser: the adapter `navigator.gpu` gives for high performance (a page cannot
/// enumerate adapters), if `options` allow it.
#[cfg(target_arch = "wasm32")]
async fn choose_adapter(options: &GpuOptions) -> Result<wgpu::Adapter, GpuError> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::BROWSER_WEBGPU;
    let request = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..wgpu::RequestAdapterOptions::default()
    };
    let adapter = wgpu::Instance::new(desc).request_adapter(&request).await.map_err(|_| GpuError::NoAdapter)?;
    if allowed(options, &adapter) {
        Ok(adapter)
    } else {
        Err(GpuError::NoAdapter)
    }
}

/// Whether `options` accept the adapter (a CPU adapter only when allowed).
fn allowed(options: &GpuOptions, adapter: &wgpu::Adapter) -> bool {
    options.allow_cpu_adapter || adapter.get_info().device_type != wgpu::DeviceType::Cpu
}

/// Lower is better: discrete, integrated, virtual, other, CPU.
#[cfg(not(target_arch = "wasm32"))]
fn rank(adapter: &wgpu::Adapter) -> u8 {
    match adapter.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

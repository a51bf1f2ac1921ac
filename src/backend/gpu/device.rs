//! The process's GPU: one wgpu adapter and device, found once (`gpu()`)
//! and shared by every unit the GPU backend prepares.
//!
//! Contract: the adapter is the one wgpu ranks first for
//! `PowerPreference::HighPerformance` over Vulkan (a discrete GPU before an
//! integrated one, before a CPU implementation such as Mesa's lavapipe),
//! so the same binary runs on the machines' software device in CI and on
//! a real GPU where one exists. The device asks for the adapter's own
//! limits (more storage per binding and per workgroup than WebGPU's
//! defaults). No adapter is an error that says what is missing (the
//! Vulkan loader, a driver), never a panic.
//!
//! Example: `gpu()?.describe()` is `llvmpipe (LLVM 15.0.6, 256 bits)
//! (Vulkan, Cpu, llvmpipe Mesa 22.3.6)` on a CI machine.

use crate::diag::{Code, Diagnostic};
use std::sync::OnceLock;

/// The GPU and what it allows.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// The one bind group layout of every shader: the unit's inputs
    /// (binding 0) and its values (binding 1), both `array<u32>`.
    pub layout: wgpu::BindGroupLayout,
    pub pipeline_layout: wgpu::PipelineLayout,
}

impl Gpu {
    /// The adapter in one line: name, API, kind and driver.
    pub fn describe(&self) -> String {
        let i = &self.info;
        format!("{} ({:?}, {:?}, {} {})", i.name, i.backend, i.device_type, i.driver, i.driver_info)
    }
}

static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();

/// The process's GPU, found on first use.
pub fn gpu() -> Result<&'static Gpu, Diagnostic> {
    GPU.get_or_init(open).as_ref().map_err(|why| {
        Diagnostic::new(Code::Unsupported, format!("no GPU to run on: {why}"))
            .help("install a Vulkan driver and its loader (on Debian: `apt-get install mesa-vulkan-drivers libvulkan1` for the software device, or the GPU vendor's driver), or run with `--device cpu`")
    })
}

/// Whether a GPU is there (for `--device auto`).
pub fn available() -> bool {
    gpu().is_ok()
}

fn open() -> Result<Gpu, String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let options =
        wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() };
    let adapter = pollster::block_on(instance.request_adapter(&options)).map_err(|e| {
        format!(
            "Vulkan found no adapter ({e}): the Vulkan loader (libvulkan.so.1) or a driver for this machine is missing"
        )
    })?;
    let limits = adapter.limits();
    let descriptor =
        wgpu::DeviceDescriptor { label: Some("tfc"), required_limits: limits.clone(), ..Default::default() };
    let (device, queue) = pollster::block_on(adapter.request_device(&descriptor))
        .map_err(|e| format!("the adapter `{}` refused a device: {e}", adapter.get_info().name))?;
    let storage = |binding| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only: false },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("tfc unit"),
        entries: &[storage(0), storage(1)],
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("tfc unit"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    // wgpu's default handler panics on an error no scope caught; tfc keeps
    // it and reports it as an internal error after the submission.
    device.on_uncaptured_error(std::sync::Arc::new(|e: wgpu::Error| {
        if let Ok(mut first) = UNCAUGHT.lock() {
            first.get_or_insert_with(|| e.to_string());
        }
    }));
    // A lost device (a driver reset, a removed GPU) fails the run with
    // its own diagnostic at the next wait, not an internal error.
    let name = adapter.get_info().name;
    device.set_device_lost_callback(move |reason, message| {
        if let Ok(mut lost) = LOST.lock() {
            lost.get_or_insert_with(|| format!("the GPU `{name}` was lost mid-run ({reason:?}: {message})"));
        }
    });
    Ok(Gpu { device, queue, info: adapter.get_info(), limits, layout, pipeline_layout })
}

/// Why the device was lost, once it is.
static LOST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The diagnostic of a lost device, if it is lost: the run stops; what
/// a checkpoint wrote is whole (checkpoints are renamed into place).
pub fn lost() -> Option<Diagnostic> {
    let why = LOST.lock().ok()?.clone()?;
    Some(
        Diagnostic::new(crate::diag::Code::Runtime, why).help(
            "the last checkpoint written is intact: rerun (with `resume`) to continue, or run with `--device cpu`",
        ),
    )
}

/// The first error of the device that no error scope caught.
static UNCAUGHT: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The diagnostic of a failed device operation: the device's loss when
/// that is the cause (its callback may run only once the device is
/// polled, so it is polled first), else an internal error saying `what`.
pub fn failed(what: String) -> Diagnostic {
    if let Ok(gpu) = gpu() {
        let _ = gpu.device.poll(wgpu::PollType::Poll);
    }
    lost().unwrap_or_else(|| Diagnostic::internal(what))
}

/// Fails with the device's first uncaught error since the last call.
pub fn check() -> Result<(), Diagnostic> {
    if let Some(d) = lost() {
        return Err(d);
    }
    let taken = UNCAUGHT.lock().ok().and_then(|mut e| e.take());
    match taken {
        Some(why) => Err(Diagnostic::internal(format!("gpu: the device reported an error: {why}"))),
        None => Ok(()),
    }
}

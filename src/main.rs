// The allocator: the compiler builds and drops many small maps and vectors
// (a tenth of a compile went to glibc's malloc and free), which mimalloc
// serves faster.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Mesa's Vulkan drivers print "error: XDG_RUNTIME_DIR is invalid or not
    // set" when the GPU backend opens a device without it (harmless, but it
    // reads as a failure). Set here, before any thread exists, as changing
    // the environment later would race with other threads reading it.
    #[cfg(feature = "gpu")]
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    tfc::cli::main()
}

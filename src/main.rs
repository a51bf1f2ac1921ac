// The allocator: the compiler builds and drops many small maps and vectors
// (a tenth of a compile went to glibc's malloc and free), which mimalloc
// serves faster.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tfc::cli::main()
}

fn main() -> std::process::ExitCode {
    tfc::cli::main()
}

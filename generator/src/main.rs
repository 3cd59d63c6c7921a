//! The `celld-gen` binary: see [`celld_gen::cli`].

fn main() -> std::process::ExitCode {
    celld_gen::cli::main()
}

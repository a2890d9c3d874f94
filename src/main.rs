//! The `tandem` binary: serve | check | render | crds | certs.
//! Everything it does is the library's (`tandem::cli`); this file only
//! chooses the allocator and hands over.
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a plan and an admission answer are
/// trees of small JSON values made and freed at once, where glibc spent
/// about half of the time of the 64 x 4 plan (`perf` in BENCHMARKS.md, issue
/// 26). The library does not set it, so the fuzz targets keep
/// AddressSanitizer's allocator; `benches/plan.rs` sets the same one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tandem::cli::run()
}

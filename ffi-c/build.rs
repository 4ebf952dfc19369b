//! Gives the shared library a SONAME, which cargo does not set by itself.
//!
//! The rule: the SONAME is `libkeylock.so.<MAJOR>`, with MAJOR taken from the crate version
//! (`CARGO_PKG_VERSION_MAJOR`), so it is `libkeylock.so.0` for every 0.x release. Programs record
//! the SONAME when they link, and the dynamic loader looks for that name at run time; a release
//! that breaks the ABI must therefore raise the major version. While keylock is 0.x the ABI may
//! still change between minor releases, so programs built against 0.y are rebuilt for 0.(y+1);
//! from 1.0 on, an incompatible change to `include/keylock.h` means a new major version and with
//! it a new SONAME. `make install` lays out `libkeylock.so.MAJOR.MINOR.PATCH` with the
//! `libkeylock.so.MAJOR` and `libkeylock.so` links that the loader and the linker look for.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    // ELF platforms only: macOS uses an install name and Windows has no such field.
    if !matches!(os.as_str(), "macos" | "ios" | "windows") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkeylock.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}

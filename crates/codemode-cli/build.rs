//! Links the `codemode` binary with packed relative relocations where the toolchain supports them.
//!
//! The binary is a position-independent executable (the host process holds the sandbox, so it keeps
//! address-space randomization), and the dynamic loader applies ~96k relative relocations every
//! time it starts. `-z pack-relative-relocs` stores them as a compact bitmap (`DT_RELR`) instead of
//! 24 bytes each: the loader reads kilobytes instead of megabytes at every start. The binary then
//! needs glibc 2.36 or newer at run time (the linker records that as a version dependency, so an
//! older system refuses it with a clear message instead of misbehaving); where the probe below fails
//! (a linker that does not know the option, a glibc older than 2.36, not Linux with glibc, a cross
//! build) the binary is linked as before. Measured: the relocation table shrinks from 2.3 MB to
//! 24 KB, a start faults in 44 fewer pages, and `codemode run` of a trivial cell took ~0.9 ms less
//! (docs/src/performance.md, "Cold start").
//!
//! `CODEMODE_RELR=0` turns it off.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CODEMODE_RELR");
    println!("cargo:rerun-if-env-changed=CC");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || env != "gnu" || std::env::var("CODEMODE_RELR").is_ok_and(|v| v == "0") {
        return;
    }
    if std::env::var("HOST") != std::env::var("TARGET") {
        return; // the probe below links for the build machine, which says nothing of the target's
    }
    if probe() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        // Read by the test that checks the linked binary (tests/cli.rs).
        println!("cargo:rustc-env=CODEMODE_RELR_LINKED=1");
    } else {
        println!("cargo:warning=linking without packed relative relocations (the linker or glibc lacks them)");
    }
}

/// Whether the system's C compiler driver (the one rustc links with) links and runs a program with
/// packed relative relocations, warnings treated as errors.
fn probe() -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else { return false };
    let src = out.join("relr_probe.c");
    let exe = out.join("relr_probe");
    if std::fs::write(&src, "static const char *p = \"x\"; int main(void) { return p[0] != 'x'; }\n").is_err() {
        return false;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let linked = Command::new(cc)
        .args(["-pie", "-fPIE", "-Wl,-z,pack-relative-relocs", "-Wl,--fatal-warnings", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .is_ok_and(|o| o.status.success());
    linked && Command::new(&exe).status().is_ok_and(|s| s.success())
}

//! Compiles `src/bpf/sockmap.bpf.c` with clang (`-target bpf -O2 -g`) into `$OUT_DIR`. Without a
//! working clang (or without the libbpf headers) the crate still builds: the object is empty, and
//! `respite_ebpf::object()` reports why, so respite-control says "sockmap unavailable" at run time.
//! `RESPITE_EBPF_CLANG` names another clang; `RESPITE_EBPF_DISABLE=1` skips the eBPF build (to
//! check the fallback).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "src/bpf/sockmap.bpf.c";
    println!("cargo::rerun-if-changed={src}");
    println!("cargo::rerun-if-env-changed=RESPITE_EBPF_CLANG");
    println!("cargo::rerun-if-env-changed=RESPITE_EBPF_DISABLE");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out.join("sockmap.bpf.o");
    let reason = out.join("unavailable.txt");
    let clang = std::env::var("RESPITE_EBPF_CLANG").unwrap_or_else(|_| "clang".into());
    let outcome = if std::env::var_os("RESPITE_EBPF_DISABLE").is_some_and(|v| v == "1") {
        Err("built with RESPITE_EBPF_DISABLE=1".to_string())
    } else {
        compile(&clang, src, &object)
    };
    match outcome {
        Ok(()) => std::fs::write(&reason, "").expect("write OUT_DIR"),
        Err(why) => {
            println!(
                "cargo::warning=eBPF sockmap programs not built ({why}); respite-control will report sockmap unavailable"
            );
            std::fs::write(&object, b"").expect("write OUT_DIR");
            std::fs::write(&reason, format!("the eBPF programs were not built: {why}"))
                .expect("write OUT_DIR");
        }
    }
}

fn compile(clang: &str, src: &str, object: &std::path::Path) -> Result<(), String> {
    // Debian keeps asm/types.h under the multiarch include directory, which `-target bpf`
    // does not search by itself.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    let output = Command::new(clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", src, "-o"])
        .arg(object)
        .output()
        .map_err(|e| format!("{clang}: {e}; install clang and libbpf-dev"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("failed");
        Err(format!("{clang}: {first}"))
    }
}

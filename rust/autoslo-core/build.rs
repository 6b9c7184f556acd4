//! Tells the tests which SIMD paths the CPU that builds them can run, so that a test comparing
//! the AVX-512 (or AVX2) kernel with another path is reported as ignored, with the reason, on a
//! CPU without it, instead of comparing a path with itself and passing. Tests run where they are
//! built (`cargo test`, `make test`); the tests check at run time that the CPU agrees.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(autoslo_host_avx2)");
    println!("cargo::rustc-check-cfg=cfg(autoslo_host_avx512)");
    println!("cargo::rerun-if-changed=build.rs");
    #[cfg(target_arch = "x86_64")]
    {
        // Only when building for the machine that builds (no cross-compilation).
        let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
        let avx2 = native && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        if avx2 {
            println!("cargo::rustc-cfg=autoslo_host_avx2");
        }
        if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
            println!("cargo::rustc-cfg=autoslo_host_avx512");
        }
    }
}

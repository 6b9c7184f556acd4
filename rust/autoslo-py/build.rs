//! Let the extension find libtorch next to it in site-packages (torch/lib) without LD_LIBRARY_PATH.
//! `autoslo/__init__.py` also imports torch first, which loads the same libraries.
fn main() {
    println!("cargo:rustc-link-arg-cdylib=-Wl,-rpath,$ORIGIN/../torch/lib");
}

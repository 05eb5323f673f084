//! The project cfg `quiesce_loom` (DESIGN.md, "A thin concurrent shell"), on for this crate
//! alone when its `loom` feature is: `sync` then takes loom's primitives.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(quiesce_loom)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LOOM").is_some() {
        println!("cargo::rustc-cfg=quiesce_loom");
    }
}

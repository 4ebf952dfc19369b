//! Build script: the deliberately broken variants that the loom models must catch.
//!
//! `make loom-swap` and `make loom-mutants` build keylock-core with one of its mutant cfgs
//! (`keylock_swap_rw_order`, `keylock_mutant_unfenced`, `keylock_mutant_unchecked_grant`) and
//! check that a loom model fails. Naming the variant in `KEYLOCK_LOOM_VARIANT`, instead of in
//! RUSTFLAGS, rebuilds only this crate per variant, so every loom run shares one target
//! directory and its dependencies are built once. The variable counts only in a loom build
//! (`--cfg keylock_loom`): no other build can be made a broken lock by an environment variable.

const VARIANTS: [&str; 4] = [
    "keylock_swap_rw_order",
    "keylock_mutant_unfenced",
    "keylock_mutant_unchecked_grant",
    "keylock_mutant_overfull",
];

fn main() {
    println!("cargo::rerun-if-env-changed=KEYLOCK_LOOM_VARIANT");
    let Ok(variant) = std::env::var("KEYLOCK_LOOM_VARIANT") else {
        return;
    };
    if variant.is_empty() || std::env::var_os("CARGO_CFG_KEYLOCK_LOOM").is_none() {
        return;
    }
    assert!(
        VARIANTS.contains(&variant.as_str()),
        "KEYLOCK_LOOM_VARIANT={variant}: expected one of {VARIANTS:?}"
    );
    println!("cargo::rustc-cfg={variant}");
}

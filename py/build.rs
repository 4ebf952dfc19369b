//! Tells the crate which interpreter it is built for (`cfg(Py_GIL_DISABLED)` and friends), as
//! pyo3 itself is told: `gil::GilCell` is a plain cell only where a GIL exists.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}

//! The llguidance C API (llguidance.h) in one static archive: linking this
//! crate as a staticlib keeps every `llg_*` function of llguidance's ffi
//! module, which the Go package constrain calls through cgo.

pub use llguidance::ffi::*;

/// The pinned llguidance version, as its own `llg_get_version` reports it;
/// referenced here so that the archive always carries the ffi module.
#[no_mangle]
pub extern "C" fn archgen_llg_version() -> *const std::os::raw::c_char {
    llguidance::ffi::llg_get_version()
}

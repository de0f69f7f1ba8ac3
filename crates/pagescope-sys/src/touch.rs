//! Stores the compiler must keep: a write to memory that nothing reads
//! back in the program, made for the kernel to see (a page's soft-dirty
//! bit).

/// Writes `value` to `place` with a volatile store, which the compiler
/// neither removes nor merges with another.
pub fn write_volatile(place: &mut u8, value: u8) {
    // SAFETY: `place` is a valid, aligned and exclusive reference to a
    // `u8` for the whole call.
    unsafe { std::ptr::write_volatile(place, value) }
}

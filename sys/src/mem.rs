//! Returning freed heap memory to the kernel. A large configuration's parsed documents are
//! freed once it is validated, but glibc keeps the freed pages resident inside its heap
//! (they are reused only by allocations that fit between the live ones), so start-up's
//! parse would stay in the appliance's resident memory beside the tables built next.
#![allow(unsafe_code)]

/// Gives the pages of the heap's free memory back to the kernel (glibc's `malloc_trim(0)`);
/// a no-op with other C libraries. Costs a walk of the allocator's free lists: call it after
/// a phase that freed much, not per request.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers and only walks and trims the allocator's own
    // free lists under the allocator's locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

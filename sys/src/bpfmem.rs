//! A BPF array map's values in our own memory: an array created with `BPF_F_MMAPABLE`
//! (values of 8 bytes: the kernel lays array values out 8 bytes apart whatever their size,
//! so 8-byte values are the ones whose mapping is a plain `[u64]`) mapped shared, so the
//! control plane writes a value the XDP program reads with one store instead of a
//! `bpf(BPF_MAP_UPDATE_ELEM)` syscall. The flow cache's front table uses it (`front_gen`,
//! appliance datapath/flowcache).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `len` 8-byte values of a mmapable BPF array, mapped read-write and shared with the
/// kernel (and every program that uses the map). Unmapped on drop; the mapping holds its
/// own reference to the map, so it outlives a closed map descriptor.
pub struct MappedWords {
    ptr: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory reached only through `AtomicU64`s, which any
// number of threads may load and store at once; the pointer stays valid until drop.
unsafe impl Send for MappedWords {}
// SAFETY: as for `Send`: every access is atomic.
unsafe impl Sync for MappedWords {}

impl MappedWords {
    /// Maps the first `len` values of the array behind `fd` (created with
    /// `BPF_F_MMAPABLE`, value size 8, at least `len` entries). The kernel refuses other
    /// maps (EINVAL) and a `len` past the array's end.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<MappedWords> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let bytes = len * size_of::<u64>();
        // SAFETY: a fresh shared mapping at an address the kernel picks, of a descriptor we
        // borrow for the call; nothing in our memory is touched. The result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<AtomicU64>()).ok_or(io::ErrorKind::Other)?;
        Ok(MappedWords { ptr, len })
    }

    fn word(&self, i: usize) -> Option<&AtomicU64> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i` is inside the mapping (checked above), which is page-aligned, so the
        // `AtomicU64` is aligned; the mapping lives as long as `self`.
        Some(unsafe { &*self.ptr.as_ptr().add(i) })
    }

    /// The value at `i` (acquire order); 0 out of range.
    pub fn load(&self, i: usize) -> u64 {
        self.word(i).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Stores `v` at value `i` (release order: what this thread wrote before, such as the
    /// map update a syscall made, is visible to whoever reads `v`). Out of range: nothing.
    pub fn store(&self, i: usize, v: u64) {
        if let Some(w) = self.word(i) {
            w.store(v, Ordering::Release);
        }
    }
}

impl Drop for MappedWords {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made, of this length, unmapped once: no reference into
        // it outlives `self` (`word` borrows from `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len * size_of::<u64>());
        }
    }
}

//! AF_XDP sockets, their UMEM and their four rings, and the ethtool queries and `poll` the
//! datapath makes on them.
//!
//! Each [`Xsk`] owns one socket bound to one interface queue and a private UMEM (so no other
//! thread ever touches its rings or frames) and tracks which frames userspace owns in a free
//! stack. A frame is always in exactly one place: the free stack, the fill ring, the rx ring,
//! the tx ring or the completion ring; the worker moves it along and never forgets one, so a
//! long run cannot leak frames. The datapath above this module is safe Rust.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};

use libxdp_sys as xdp;

/// Size of a UMEM chunk: one page, which holds a 1500-byte frame plus both headrooms.
pub const FRAME_SIZE: u32 = 4096;

/// Frames a copy-mode `sendto` transmits unless the socket is told otherwise (the kernel's
/// `TX_BATCH_SIZE`).
const COPY_TX_BATCH: u32 = 32;

/// One received (or to-be-sent) frame: UMEM offset of its first byte and its length.
#[derive(Debug, Clone, Copy, Default)]
pub struct Desc {
    /// Offset of the first packet byte from the start of the UMEM.
    pub addr: u64,
    /// Packet length.
    pub len: u32,
}

/// Settings for one socket.
#[derive(Debug, Clone)]
pub struct XskConfig {
    /// Interface name.
    pub ifname: String,
    /// Queue to bind to.
    pub queue: u32,
    /// Frames in the UMEM.
    pub frames: u32,
    /// Descriptors in each of the four rings (power of two).
    pub ring_size: u32,
    /// Bytes the kernel leaves in front of received packets, on top of XDP_PACKET_HEADROOM.
    pub headroom: u32,
    /// Ask the kernel to busy-poll this socket.
    pub busy_poll: bool,
}

/// An AF_XDP socket with its UMEM and rings, owned by one worker thread.
pub struct Xsk {
    // The rings are boxed because libxdp keeps pointers to them (the fill/comp pair between
    // UMEM and socket creation, rx/tx until the socket is deleted): they must not move.
    fill: Box<xdp::xsk_ring_prod>,
    comp: Box<xdp::xsk_ring_cons>,
    rx: Box<xdp::xsk_ring_cons>,
    tx: Box<xdp::xsk_ring_prod>,
    socket: Option<NonNull<xdp::xsk_socket>>,
    umem: Option<NonNull<xdp::xsk_umem>>,
    area: NonNull<u8>,
    area_len: usize,
    fd: RawFd,
    zero_copy: bool,
    /// Why the kernel refused zero-copy (its error), when this socket runs in copy mode.
    zero_copy_refused: Option<String>,
    /// Chunk base addresses userspace owns.
    free: Vec<u64>,
    /// Frames to keep out of the fill ring so two-arm copies into this socket find one.
    tx_reserve: usize,
    tx_pending: u32,
    ring_size: u32,
    /// Frames one copy-mode `sendto` transmits at most (the kernel's default is 32).
    tx_budget: u32,
}

// SAFETY: every pointer in `Xsk` refers to memory and kernel objects owned exclusively by
// this value (its own mmap'd UMEM, its own socket and rings); nothing is shared with another
// thread, so moving the whole value to the worker thread is sound.
unsafe impl Send for Xsk {}

impl Xsk {
    /// Creates the UMEM and socket: zero-copy first, copy mode when the driver refuses.
    /// The socket is created without libxdp's default program (we bring our own) and with
    /// `need_wakeup`, so an idle socket costs no CPU.
    ///
    /// A queue still busy is tried again for up to two seconds: the kernel releases a
    /// closed socket's hold on its queue in deferred work, so a process taking over from
    /// one that has just closed its sockets can find the queue busy for a moment.
    pub fn new(cfg: &XskConfig) -> io::Result<Xsk> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match Xsk::new_once(cfg) {
                Err(e)
                    if e.kind() == io::ErrorKind::ResourceBusy
                        && std::time::Instant::now() < until =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }

    fn new_once(cfg: &XskConfig) -> io::Result<Xsk> {
        match Xsk::create(cfg, true) {
            Ok(x) => Ok(x),
            Err(zc) => {
                let mut x = Xsk::create(cfg, false).map_err(|copy| {
                    io::Error::new(
                        copy.kind(),
                        format!("zero-copy bind failed ({zc}), copy-mode bind failed ({copy})"),
                    )
                })?;
                // The kernel's reason, for the operator who expected zero-copy on this NIC.
                tracing::info!(
                    interface = %cfg.ifname,
                    queue = cfg.queue,
                    "AF_XDP zero-copy bind failed ({zc}): this queue runs in copy mode"
                );
                x.zero_copy_refused = Some(zc.to_string());
                Ok(x)
            }
        }
    }

    fn create(cfg: &XskConfig, zero_copy: bool) -> io::Result<Xsk> {
        let (area, area_len) = map_area(cfg.frames)?;
        // From here on the mapping belongs to `xsk`: an error below unmaps it in Drop.
        let mut xsk = Xsk::unbound(cfg, zero_copy, area, area_len);
        let umem = xsk.create_umem(cfg)?;
        xsk.create_socket(cfg, umem)?;
        if cfg.busy_poll {
            xsk.set_busy_poll()?;
        }
        if !zero_copy {
            xsk.raise_tx_budget();
        }
        xsk.refill();
        Ok(xsk)
    }

    /// The value around a fresh UMEM area: every frame free, rings not yet mapped.
    fn unbound(cfg: &XskConfig, zero_copy: bool, area: NonNull<u8>, area_len: usize) -> Xsk {
        let frames = cfg.frames as usize;
        Xsk {
            // SAFETY: the ring structs are plain C data (integers and pointers) for which
            // all-zero is the "not yet mapped" state libxdp expects to fill in.
            fill: Box::new(unsafe { std::mem::zeroed() }),
            // SAFETY: as above.
            comp: Box::new(unsafe { std::mem::zeroed() }),
            // SAFETY: as above.
            rx: Box::new(unsafe { std::mem::zeroed() }),
            // SAFETY: as above.
            tx: Box::new(unsafe { std::mem::zeroed() }),
            socket: None,
            umem: None,
            area,
            area_len,
            fd: -1,
            zero_copy,
            zero_copy_refused: None,
            free: (0..cfg.frames as u64)
                .map(|i| i * FRAME_SIZE as u64)
                .collect(),
            tx_reserve: (frames / 4).min(cfg.ring_size as usize),
            tx_pending: 0,
            ring_size: cfg.ring_size,
            tx_budget: COPY_TX_BATCH,
        }
    }

    /// Registers the area as a UMEM with its fill and completion rings.
    fn create_umem(&mut self, cfg: &XskConfig) -> io::Result<NonNull<xdp::xsk_umem>> {
        let ucfg = xdp::xsk_umem_config {
            fill_size: cfg.ring_size,
            comp_size: cfg.ring_size,
            frame_size: FRAME_SIZE,
            frame_headroom: cfg.headroom,
            flags: 0,
        };
        let mut umem = ptr::null_mut();
        // SAFETY: `area` is a live mapping of `area_len` bytes that outlives the UMEM (it is
        // unmapped in Drop after xsk_umem__delete); the ring pointers are boxed and stable.
        let rc = unsafe {
            xdp::xsk_umem__create(
                &mut umem,
                self.area.as_ptr().cast(),
                self.area_len as u64,
                &mut *self.fill,
                &mut *self.comp,
                &ucfg,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        self.umem = NonNull::new(umem);
        self.umem
            .ok_or_else(|| io::Error::other("xsk_umem__create returned null"))
    }

    /// Creates the socket on `umem`, bound to the configured queue with its rx and tx rings.
    fn create_socket(&mut self, cfg: &XskConfig, umem: NonNull<xdp::xsk_umem>) -> io::Result<()> {
        let bind = xdp::XDP_USE_NEED_WAKEUP
            | if self.zero_copy {
                xdp::XDP_ZEROCOPY
            } else {
                xdp::XDP_COPY
            };
        let scfg = xdp::xsk_socket_config {
            rx_size: cfg.ring_size,
            tx_size: cfg.ring_size,
            __bindgen_anon_1: xdp::xsk_socket_config__bindgen_ty_1 {
                libxdp_flags: xdp::XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
            },
            xdp_flags: 0,
            bind_flags: bind as u16,
        };
        let ifname = CString::new(cfg.ifname.as_str())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
        let mut socket = ptr::null_mut();
        // SAFETY: `umem` is the live UMEM created above; the name is a valid C string; the
        // rx/tx ring structs are boxed, so libxdp's pointers to them stay valid until Drop.
        let rc = unsafe {
            xdp::xsk_socket__create(
                &mut socket,
                ifname.as_ptr(),
                cfg.queue,
                umem.as_ptr(),
                &mut *self.rx,
                &mut *self.tx,
                &scfg,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        self.socket = NonNull::new(socket);
        let socket = self
            .socket
            .ok_or_else(|| io::Error::other("xsk_socket__create returned null"))?;
        // SAFETY: `socket` is the live socket created above.
        self.fd = unsafe { xdp::xsk_socket__fd(socket.as_ptr()) };
        if self.fd < 0 {
            return Err(io::Error::other("AF_XDP socket has no file descriptor"));
        }
        Ok(())
    }

    /// Lets one copy-mode kick transmit a whole tx ring instead of 32 frames
    /// (`XDP_MAX_TX_SKB_BUDGET`, Linux 6.17+): with the 32-frame budget a busy worker's
    /// `sendto` returns EAGAIN every other time on veth and costs a second syscall.
    /// Older kernels refuse the option; the socket then keeps the default and `flush`
    /// kicks once per 32 frames.
    fn raise_tx_budget(&mut self) {
        const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
        let budget: u32 = self.ring_size;
        // SAFETY: `fd` is our open, bound socket and `budget` a live u32 of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd,
                libc::SOL_XDP,
                XDP_MAX_TX_SKB_BUDGET,
                (&budget as *const u32).cast(),
                size_of::<u32>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            self.tx_budget = budget;
        } else {
            tracing::debug!(
                error = %io::Error::last_os_error(),
                "kernel refused XDP_MAX_TX_SKB_BUDGET; copy-mode kicks send 32 frames each"
            );
        }
    }

    fn set_busy_poll(&self) -> io::Result<()> {
        // Values from the kernel's AF_XDP busy-poll guidance: prefer busy polling, poll for
        // up to 20 us per syscall, and let one poll process a whole ring's worth.
        const SO_PREFER_BUSY_POLL: libc::c_int = 69;
        const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
        for (opt, val) in [
            (SO_PREFER_BUSY_POLL, 1),
            (libc::SO_BUSY_POLL, 20),
            (SO_BUSY_POLL_BUDGET, self.ring_size.min(256) as libc::c_int),
        ] {
            // SAFETY: `fd` is our open socket and `val` a live c_int of the advertised size.
            let rc = unsafe {
                libc::setsockopt(
                    self.fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&val as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The socket's file descriptor (for XSKMAP insertion and `poll`).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// True when the socket is bound in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The kernel's reason for refusing zero-copy, when the socket runs in copy mode.
    pub fn zero_copy_refused(&self) -> Option<&str> {
        self.zero_copy_refused.as_deref()
    }

    /// Moves free frames into the fill ring, keeping a reserve for two-arm copies.
    pub fn refill(&mut self) {
        let spare = self.free.len().saturating_sub(self.tx_reserve) as u32;
        if spare == 0 {
            return;
        }
        // SAFETY: the fill ring was mapped by xsk_umem__create and only this value uses it.
        let room = unsafe { xdp::xsk_prod_nb_free(&mut *self.fill, spare) }.min(spare);
        if room == 0 {
            return;
        }
        let mut idx = 0;
        // SAFETY: as above; `room` slots are free, so the reservation succeeds whole.
        let n = unsafe { xdp::xsk_ring_prod__reserve(&mut *self.fill, room, &mut idx) };
        if n == 0 {
            return;
        }
        for i in 0..n {
            let Some(addr) = self.free.pop() else { break };
            // SAFETY: `idx + i` is inside the `n` slots reserved above.
            unsafe { *xdp::xsk_ring_prod__fill_addr(&mut *self.fill, idx.wrapping_add(i)) = addr };
        }
        // SAFETY: publishes exactly the `n` slots reserved and written above.
        unsafe { xdp::xsk_ring_prod__submit(&mut *self.fill, n) };
    }

    /// Takes up to `out.len()` received frames off the rx ring.
    pub fn recv(&mut self, out: &mut [Desc]) -> usize {
        let mut idx = 0;
        // SAFETY: the rx ring was mapped by xsk_socket__create and only this value uses it.
        let n = unsafe { xdp::xsk_ring_cons__peek(&mut *self.rx, out.len() as u32, &mut idx) };
        for (i, d) in out.iter_mut().take(n as usize).enumerate() {
            // SAFETY: `idx + i` is inside the `n` entries peeked above.
            let desc =
                unsafe { &*xdp::xsk_ring_cons__rx_desc(&*self.rx, idx.wrapping_add(i as u32)) };
            *d = Desc {
                addr: desc.addr,
                len: desc.len,
            };
        }
        if n > 0 {
            // SAFETY: releases exactly the entries peeked above, whose contents we copied.
            unsafe { xdp::xsk_ring_cons__release(&mut *self.rx, n) };
        }
        n as usize
    }

    /// Reclaims frames the kernel has finished transmitting.
    pub fn complete(&mut self) -> usize {
        let mut idx = 0;
        // SAFETY: the completion ring was mapped by xsk_umem__create; only we consume it.
        let n = unsafe { xdp::xsk_ring_cons__peek(&mut *self.comp, self.ring_size, &mut idx) };
        for i in 0..n {
            // SAFETY: `idx + i` is inside the `n` entries peeked above.
            let addr = unsafe { *xdp::xsk_ring_cons__comp_addr(&*self.comp, idx.wrapping_add(i)) };
            self.free.push(chunk_of(addr));
        }
        if n > 0 {
            // SAFETY: releases exactly the entries peeked above.
            unsafe { xdp::xsk_ring_cons__release(&mut *self.comp, n) };
        }
        n as usize
    }

    /// Queues one frame for transmission; `false` when the tx ring stays full (the caller
    /// then still owns the frame). Call [`Xsk::flush`] after a batch.
    pub fn send(&mut self, d: Desc) -> bool {
        if self.reserve_tx(d) {
            return true;
        }
        // Copy mode transmits at most `tx_budget` frames per kick: publish what is queued, kick,
        // reclaim completions and try once more before giving up on the frame.
        self.publish_tx();
        self.kick();
        self.complete();
        self.reserve_tx(d)
    }

    fn reserve_tx(&mut self, d: Desc) -> bool {
        let mut idx = 0;
        // SAFETY: the tx ring was mapped by xsk_socket__create and only this value uses it.
        if unsafe { xdp::xsk_ring_prod__reserve(&mut *self.tx, 1, &mut idx) } != 1 {
            return false;
        }
        // SAFETY: `idx` is the slot reserved above.
        let slot = unsafe { &mut *xdp::xsk_ring_prod__tx_desc(&mut *self.tx, idx) };
        slot.addr = d.addr;
        slot.len = d.len;
        slot.options = 0;
        self.tx_pending += 1;
        true
    }

    fn publish_tx(&mut self) {
        if self.tx_pending > 0 {
            // SAFETY: publishes exactly the slots reserved and written by `reserve_tx`.
            unsafe { xdp::xsk_ring_prod__submit(&mut *self.tx, self.tx_pending) };
            self.tx_pending = 0;
        }
    }

    /// Publishes queued tx descriptors and kicks the kernel while the tx ring holds frames
    /// it has not taken (copy mode takes `tx_budget` per kick), reclaiming completions as it goes.
    /// Returns true when frames are still waiting, so the worker loops instead of sleeping.
    pub fn flush(&mut self) -> bool {
        self.publish_tx();
        let mut waiting = self.tx_waiting();
        // Bounded: a ring's worth of kicks, and stop as soon as a kick makes no progress
        // (link down, or a zero-copy driver that completes asynchronously).
        for _ in 0..self.ring_size / self.tx_budget + 1 {
            // SAFETY: reads the flags word of our mapped tx ring.
            if waiting == 0 || unsafe { xdp::xsk_ring_prod__needs_wakeup(&*self.tx) } == 0 {
                break;
            }
            self.kick();
            self.complete();
            let now = self.tx_waiting();
            if now >= waiting {
                waiting = now;
                break;
            }
            waiting = now;
        }
        waiting > 0
    }

    /// Descriptors in the tx ring the kernel has not taken yet.
    fn tx_waiting(&mut self) -> u32 {
        // SAFETY: the tx ring is ours; asking for the whole ring refreshes the cached
        // consumer index from the kernel.
        let free = unsafe { xdp::xsk_prod_nb_free(&mut *self.tx, self.ring_size) };
        self.ring_size.saturating_sub(free)
    }

    /// Wakes the kernel's tx processing (and, with busy polling, its rx processing).
    pub fn kick(&self) {
        // SAFETY: a zero-length non-blocking send on our own socket; the kernel reads
        // nothing from the null buffer. Errors (EAGAIN, EBUSY, ENOBUFS) mean "try later".
        unsafe { libc::sendto(self.fd, ptr::null(), 0, libc::MSG_DONTWAIT, ptr::null(), 0) };
    }

    /// Drives the device's receive processing from this thread: with SO_PREFER_BUSY_POLL
    /// the kernel leaves NAPI to the application, which runs it through this syscall.
    pub fn busy_poll_rx(&self) {
        // SAFETY: a zero-length non-blocking receive on our own socket with a null buffer,
        // which AF_XDP treats as a wakeup and never writes to. EAGAIN and friends are fine.
        unsafe {
            libc::recvfrom(
                self.fd,
                ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
    }

    /// Returns a frame (by any address inside it) to the free stack.
    pub fn release(&mut self, addr: u64) {
        self.free.push(chunk_of(addr));
    }

    /// Takes a free frame for a two-arm copy; `None` when every frame is in flight.
    pub fn take_free(&mut self) -> Option<u64> {
        self.free.pop()
    }

    /// The whole UMEM chunk starting at `chunk`, or `None` for an address outside the UMEM.
    ///
    /// Only called for chunks userspace owns (just received, or taken from the free stack),
    /// which the kernel does not touch until we hand them back through a ring.
    pub fn chunk_mut(&mut self, chunk: u64) -> Option<&mut [u8]> {
        let start = usize::try_from(chunk).ok()?;
        let end = start.checked_add(FRAME_SIZE as usize)?;
        if end > self.area_len || !chunk.is_multiple_of(FRAME_SIZE as u64) {
            return None;
        }
        // SAFETY: `start..end` lies inside our mapping (checked above); `&mut self` makes
        // this the only live reference into the UMEM, and the kernel does not write a chunk
        // userspace owns.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.area.as_ptr().add(start), FRAME_SIZE as usize)
        })
    }
}

/// Maps an anonymous, populated area of `frames` UMEM chunks; the caller unmaps it.
fn map_area(frames: u32) -> io::Result<(NonNull<u8>, usize)> {
    let area_len = (frames as usize)
        .checked_mul(FRAME_SIZE as usize)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "UMEM too large"))?;
    // SAFETY: an anonymous private mapping with no address hint has no preconditions;
    // the result is checked against MAP_FAILED before use.
    let mem = unsafe {
        libc::mmap(
            ptr::null_mut(),
            area_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let area = NonNull::new(mem.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
    Ok((area, area_len))
}

/// The chunk base of any address inside it (aligned mode: chunks are FRAME_SIZE apart).
pub fn chunk_of(addr: u64) -> u64 {
    addr & !(FRAME_SIZE as u64 - 1)
}

impl Drop for Xsk {
    fn drop(&mut self) {
        if let Some(s) = self.socket.take() {
            // SAFETY: the socket was created by xsk_socket__create and is deleted once.
            unsafe { xdp::xsk_socket__delete(s.as_ptr()) };
        }
        if let Some(u) = self.umem.take() {
            // SAFETY: its only socket is gone, so the UMEM has no users left.
            unsafe { xdp::xsk_umem__delete(u.as_ptr()) };
        }
        // SAFETY: unmaps exactly the region `map_area` mapped, after the kernel objects
        // that referenced it have been released.
        unsafe { libc::munmap(self.area.as_ptr().cast(), self.area_len) };
    }
}

/// The kernel's drop counters for one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames dropped for reasons other than the two below.
    pub rx_dropped: u64,
    /// Frames dropped because the rx ring was full (the worker is too slow).
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived (UMEM or fill ring too small).
    pub rx_fill_ring_empty: u64,
    /// Invalid rx descriptors.
    pub rx_invalid: u64,
    /// Invalid tx descriptors (a bug in the worker).
    pub tx_invalid: u64,
}

/// Reads `XDP_STATISTICS` from an AF_XDP socket.
pub fn kernel_stats(fd: RawFd) -> io::Result<KernelStats> {
    // SAFETY: xdp_statistics is plain integers; all-zero is a valid value.
    let mut st: xdp::xdp_statistics = unsafe { std::mem::zeroed() };
    let mut len = size_of::<xdp::xdp_statistics>() as libc::socklen_t;
    // SAFETY: `st` is a live, writable xdp_statistics and `len` holds its size; the kernel
    // writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            xdp::XDP_STATISTICS as libc::c_int,
            (&mut st as *mut xdp::xdp_statistics).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(KernelStats {
        rx_dropped: st.rx_dropped,
        rx_ring_full: st.rx_ring_full,
        rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
        rx_invalid: st.rx_invalid_descs,
        tx_invalid: st.tx_invalid_descs,
    })
}

/// Runs the ethtool ioctl whose request (starting with its `cmd` word) is `data` on
/// `ifname`, through a socket so the answer comes from the calling thread's network
/// namespace (sysfs answers for the namespace it was mounted in). False when it failed.
///
/// # Safety
/// `data` must point to a live, writable ethtool request structure of the kind its `cmd`
/// names, which the kernel fills.
unsafe fn ethtool(ifname: &str, data: *mut libc::c_void) -> bool {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    #[repr(C)]
    struct IfreqData {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut libc::c_void,
        // struct ifreq is 40 bytes on 64-bit Linux: name plus a 24-byte union.
        _pad: [u8; 16],
    }
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return false;
    }
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    for (d, b) in req.name.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    // SAFETY: creating a datagram socket has no preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `req` is a live ifreq whose data pointer is the caller's request (see the
    // function's contract); both outlive the call.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &mut req as *mut IfreqData) };
    // SAFETY: closes the socket opened above, once.
    unsafe { libc::close(fd) };
    rc == 0
}

/// Receive queues of an interface from the driver (`ethtool -l`: rx + combined channels),
/// in the calling thread's network namespace. `None` when the driver does not say.
pub fn channel_count(ifname: &str) -> Option<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    #[repr(C)]
    #[derive(Default)]
    struct EthtoolChannels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: `ch` is a live ethtool_channels, the structure ETHTOOL_GCHANNELS fills.
    if !unsafe { ethtool(ifname, (&mut ch as *mut EthtoolChannels).cast()) } {
        return None;
    }
    let n = ch.rx_count.saturating_add(ch.combined_count);
    (n > 0).then_some(n)
}

/// Whether `ifname` is up with a link (the kernel's ETHTOOL_GLINK: administratively up and
/// carrier on); `None` when the interface is gone or its driver does not say.
pub fn link_up(ifname: &str) -> Option<bool> {
    const ETHTOOL_GLINK: u32 = 0xa;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut v = EthtoolValue {
        cmd: ETHTOOL_GLINK,
        data: 0,
    };
    // SAFETY: `v` is a live ethtool_value, the structure ETHTOOL_GLINK fills.
    if !unsafe { ethtool(ifname, (&mut v as *mut EthtoolValue).cast()) } {
        return None;
    }
    Some(v.data != 0)
}

/// The interface's driver name (`ethtool -i`: "veth", "mlx5_core", ...), in the calling
/// thread's network namespace. `None` when the ioctl fails.
pub fn driver_name(ifname: &str) -> Option<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x3;
    // struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
    // erom_version[32], reserved2[12], then five u32 counts.
    #[repr(C)]
    struct EthtoolDrvinfo {
        cmd: u32,
        driver: [u8; 32],
        rest: [u8; 32 * 4 + 12 + 4 * 5],
    }
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 32 * 4 + 12 + 4 * 5],
    };
    // SAFETY: `info` is a live ethtool_drvinfo (196 bytes), the structure ETHTOOL_GDRVINFO
    // fills.
    if !unsafe { ethtool(ifname, (&mut info as *mut EthtoolDrvinfo).cast()) } {
        return None;
    }
    let end = info.driver.iter().position(|b| *b == 0).unwrap_or(32);
    let name = String::from_utf8_lossy(&info.driver[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

/// Waits up to `timeout_ms` for any of `fds` to become readable; `Ok(true)` when one did.
pub fn poll_readable(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<bool> {
    for p in fds.iter_mut() {
        p.events = libc::POLLIN;
        p.revents = 0;
    }
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfd structs.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(rc > 0)
}

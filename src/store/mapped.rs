//! A file mapped into memory for reading, guarded against being cut short
//! under its reader.
//!
//! A reader of a mapped file that someone truncates in place is sent
//! `SIGBUS` when it touches a page past the new end, which kills it. The
//! model file is mapped so that scoring a message reads the pages its
//! features need rather than the whole file, so the snapshot's readers take
//! that risk; this module takes it away. A `SIGBUS` handler, installed once
//! and only for faults inside a mapping made here, puts a page of zeros in
//! place of the missing one and marks the mapping damaged; the faulting read
//! then goes on and sees zeros, and [`Mapped::intact`] tells the reader to
//! throw away what it read. Faults anywhere else get the handler that was in
//! place before (the default: the process ends), as if this one did not
//! exist.
//!
//! Linux only; elsewhere [`Mapped::new`] returns `None` and callers read the
//! file into memory. It also returns `None` when [`SLOTS`] mappings are
//! already live in the process, so the handler only ever scans a small
//! fixed table, without locks or allocation.

use std::fs::File;

/// How many guarded mappings can be live at once.
pub const SLOTS: usize = 64;

/// A read-only mapping of a whole file, guarded as the module docs say.
pub struct Mapped {
    #[cfg(target_os = "linux")]
    map: std::mem::ManuallyDrop<memmap2::Mmap>,
    #[cfg(target_os = "linux")]
    slot: usize,
}

impl Mapped {
    /// Maps the first `len` bytes of `file` (its whole length when it was
    /// opened), or `None` if it cannot be mapped under the guard here.
    pub fn new(file: &File, len: usize) -> Option<Mapped> {
        #[cfg(target_os = "linux")]
        {
            if len == 0 {
                return None;
            }
            guard::install()?;
            let slot = guard::claim()?;
            // SAFETY: the mapping is read-only (shared: it sees the file's
            // page cache). What another process does to the file can still
            // change or cut short what we see: every read of it is
            // bounds-checked, pages cut off are replaced with zeros by the
            // guard, and readers check that the file was left alone before
            // acting on what they read (see `Snapshot::intact`).
            let map = unsafe { memmap2::MmapOptions::new().len(len).map(file) };
            let Ok(map) = map else {
                guard::release(slot);
                return None;
            };
            guard::arm(slot, map.as_ptr() as usize, map.len());
            // A reader's lookups land all over the file, so it ends up
            // mapping nearly every page. With this advice the kernel maps
            // huge page-cache folios (a writer's single large write leaves
            // them) with a few huge-page entries rather than 4 KiB at a
            // time, and a read into the page cache after the file was
            // evicted builds huge folios where the file system has them:
            // 2 MiB from disk at a time, which the lookups would have
            // touched anyway. Where huge pages are not supported the advice
            // is refused, and ignored here.
            let _ = map.advise(memmap2::Advice::HugePage);
            Some(Mapped {
                map: std::mem::ManuallyDrop::new(map),
                slot,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (file, len);
            None
        }
    }

    /// Whether every page read so far was the file's: false once a read
    /// fell past the end of a file cut short under this mapping (it read
    /// zeros instead).
    pub fn intact(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            !guard::faulted(self.slot)
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        #[cfg(target_os = "linux")]
        {
            &self.map[..]
        }
        #[cfg(not(target_os = "linux"))]
        {
            &[]
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        {
            // The slot is given up first: no read of this mapping can be
            // under way (`self` is borrowed mutably), and a new mapping at
            // the same address must not find this slot.
            guard::release(self.slot);
            // SAFETY: `map` is not used again.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.map) };
        }
    }
}

#[cfg(target_os = "linux")]
mod guard {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::SLOTS;

    /// One live mapping: its address range, and whether a read in it fell
    /// past the end of its file. `start == 0`: free; `start == CLAIMED`:
    /// taken, not yet mapped.
    struct Slot {
        start: AtomicUsize,
        end: AtomicUsize,
        faulted: AtomicBool,
    }

    const CLAIMED: usize = usize::MAX;

    #[allow(clippy::declare_interior_mutable_const)]
    const FREE: Slot = Slot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        faulted: AtomicBool::new(false),
    };

    static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

    /// The handler in place before ours, and the page size; set once, before
    /// ours is installed.
    struct Previous {
        action: libc::sigaction,
        page: usize,
    }

    // SAFETY: `sigaction` is plain data (a handler address, flags, a mask),
    // written once before it is shared and only read afterwards.
    unsafe impl Sync for Previous {}
    unsafe impl Send for Previous {}

    static PREVIOUS: OnceLock<Previous> = OnceLock::new();
    static INSTALLED: OnceLock<bool> = OnceLock::new();

    /// Installs the handler once per process; `None` if it could not be.
    pub(super) fn install() -> Option<()> {
        let installed = *INSTALLED.get_or_init(|| {
            // SAFETY: sysconf only reads a system value.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let Some(page) = usize::try_from(page).ok().filter(|p| p.is_power_of_two()) else {
                return false;
            };
            // SAFETY: a zeroed sigaction is valid (no handler, no flags, an
            // empty mask); the one installed names a handler that makes only
            // async-signal-safe calls (see `on_sigbus`).
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut action) } != 0 {
                return false;
            }
            // Set before ours is installed: the handler always finds it.
            let _ = PREVIOUS.set(Previous { action, page });
            let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
            ours.sa_sigaction = on_sigbus as *const () as usize;
            ours.sa_flags = libc::SA_SIGINFO;
            // SAFETY: as above.
            unsafe { libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut()) == 0 }
        });
        installed.then_some(())
    }

    /// Takes a free slot, or `None` if all are taken.
    pub(super) fn claim() -> Option<usize> {
        TABLE.iter().position(|s| {
            s.start
                .compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Records the mapping `start..start + len` in `slot`.
    pub(super) fn arm(slot: usize, start: usize, len: usize) {
        let s = &TABLE[slot];
        s.faulted.store(false, Ordering::Relaxed);
        s.end.store(start + len, Ordering::Relaxed);
        s.start.store(start, Ordering::Release);
    }

    /// Frees `slot`.
    pub(super) fn release(slot: usize) {
        let s = &TABLE[slot];
        s.end.store(0, Ordering::Relaxed);
        s.start.store(0, Ordering::Release);
    }

    /// Whether a read in `slot`'s mapping fell past its file's end.
    pub(super) fn faulted(slot: usize) -> bool {
        TABLE[slot].faulted.load(Ordering::Acquire)
    }

    /// The `SIGBUS` handler. Only async-signal-safe calls: atomics, `mmap`
    /// and `sigaction` (both plain system calls).
    extern "C" fn on_sigbus(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        _context: *mut libc::c_void,
    ) {
        let Some(previous) = PREVIOUS.get() else {
            // Cannot happen (set before the handler is installed); the
            // default action is the safe one.
            // SAFETY: a zeroed sigaction is SIG_DFL.
            unsafe {
                let default: libc::sigaction = std::mem::zeroed();
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
            return;
        };
        // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        // Only a fault raised by the kernel (si_code > 0) is a read past a
        // cut; a SIGBUS another process sent goes to the previous action.
        let fault = code > 0;
        for s in TABLE.iter().filter(|_| fault) {
            let start = s.start.load(Ordering::Acquire);
            let end = s.end.load(Ordering::Relaxed);
            if start == 0 || start == CLAIMED || addr < start || addr >= end {
                continue;
            }
            // Everything from the faulting page to the end of the mapping
            // is past the cut (a file is cut from its end): one mapping of
            // zeros for all of it, so a reader going on faults no more.
            let page = addr & !(previous.page - 1);
            let len = (end - page).next_multiple_of(previous.page);
            // SAFETY: replaces the rest of our own read-only mapping with
            // zeros; the range stays ours until `Mapped` unmaps it whole.
            let zeros = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if zeros != libc::MAP_FAILED {
                s.faulted.store(true, Ordering::Release);
                return;
            }
            break;
        }
        // Not ours (or the pages could not be replaced): the previous
        // action takes it, a fault when the read is tried again, a signal
        // sent by another process when it is raised again.
        // SAFETY: restores the action that was in place before ours, and
        // raises a signal; both async-signal-safe.
        unsafe {
            libc::sigaction(signal, &previous.action, std::ptr::null_mut());
            if !fault {
                libc::raise(signal);
            }
        }
    }
}

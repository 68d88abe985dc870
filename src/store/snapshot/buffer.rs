//! The buffer a model file is read into: anonymous memory, in huge pages
//! where the system gives them, populated before the read.

use std::io;

/// Memory for a whole model file: an anonymous mapping, populated in one
/// call, which costs less than taking a page fault for each page of a heap
/// buffer. A file of 2 MiB or more goes in huge pages where the system
/// gives them (transparent huge pages on Linux, on request): the window it
/// is read into starts on a 2 MiB boundary, so each 2 MiB of the file is
/// one page to clear and map instead of 512, which is much of what opening
/// a large model costs. Where huge pages are not to be had, the window is
/// populated with small pages as for a small file.
pub(super) struct Buffer {
    map: memmap2::MmapMut,
    /// Where the file starts in `map`.
    start: usize,
    len: usize,
}

/// The size of a huge page where there are any (x86-64, and most aarch64
/// systems).
pub(super) const HUGE_PAGE: usize = 2 << 20;

impl Buffer {
    /// A buffer of `len` bytes (zeros), ready to be read into.
    pub(super) fn new(len: usize) -> io::Result<Buffer> {
        if len < HUGE_PAGE || !cfg!(target_os = "linux") {
            let map = memmap2::MmapOptions::new().len(len).populate().map_anon()?;
            return Ok(Buffer { map, start: 0, len });
        }
        let room = len
            .checked_add(HUGE_PAGE)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let map = memmap2::MmapOptions::new().len(room).map_anon()?;
        let start = map.as_ptr().align_offset(HUGE_PAGE).min(HUGE_PAGE);
        #[cfg(target_os = "linux")]
        {
            // Best effort, both: a kernel without transparent huge pages,
            // or too old to populate on request, still gives memory that
            // works, page by page.
            let _ = map.advise(memmap2::Advice::HugePage);
            let _ = map.advise_range(memmap2::Advice::PopulateWrite, start, len);
        }
        Ok(Buffer { map, start, len })
    }
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.start..self.start + self.len]
    }
}

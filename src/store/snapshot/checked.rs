//! The `.checked` record (what the model file was when its writer read it
//! back and found its checksum right, so readers may skip the check while
//! it is unchanged), and the huge-page read buffer.

use super::*;

/// What tells one state of a file from another: which file it is, its size,
/// and its modification and change times. A write, a truncation, a change
/// of mode or owner, a rename onto it: each sets a new change time, which no
/// user can set back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileStamp {
    pub(super) device: u64,
    pub(super) inode: u64,
    pub(super) size: u64,
    pub(super) modified: (i64, i64),
    pub(super) changed: (i64, i64),
}

impl FileStamp {
    pub(super) fn of(meta: &fs::Metadata) -> FileStamp {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileStamp {
                device: meta.dev(),
                inode: meta.ino(),
                size: meta.size(),
                modified: (meta.mtime(), meta.mtime_nsec()),
                changed: (meta.ctime(), meta.ctime_nsec()),
            }
        }
        #[cfg(not(unix))]
        {
            let since = |t: io::Result<std::time::SystemTime>| {
                t.ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or((0, 0), |d| {
                        (d.as_secs() as i64, i64::from(d.subsec_nanos()))
                    })
            };
            FileStamp {
                device: 0,
                inode: 0,
                size: meta.len(),
                modified: since(meta.modified()),
                changed: since(meta.modified()),
            }
        }
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.device, self.inode, self.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            self.modified.0,
            self.modified.1,
            self.changed.0,
            self.changed.1,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// The record a writer leaves beside a snapshot it wrote (`NAME.checked`
/// for `NAME`): the file's [`FileStamp`] and checksum, taken after the
/// writer read the file back and found the checksum right at a moment when
/// the file system already gave later changes a later change time. A reader
/// that finds the file with that stamp and checksum knows every byte is as
/// checked and skips its own check of the whole file; a file changed in
/// place since has another change time and is checked whole. A missing,
/// damaged or stale record only costs readers that check.
pub(super) struct Checked {
    pub(super) stamp: FileStamp,
    pub(super) checksum: u64,
}

/// First bytes of a [`Checked`] record, and its length.
pub(super) const CHECKED_MAGIC: &[u8; 8] = b"BAYESCHK";
pub(super) const CHECKED_LEN: usize = 8 + 7 * 8 + 8 + 8;

impl Checked {
    /// Where the record for the snapshot at `path` lives.
    pub(super) fn path(path: &Path) -> Option<PathBuf> {
        let mut name = path.file_name()?.to_owned();
        name.push(".checked");
        Some(path.with_file_name(name))
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHECKED_LEN);
        out.extend_from_slice(CHECKED_MAGIC);
        self.stamp.encode(&mut out);
        out.extend_from_slice(&self.checksum.to_le_bytes());
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// The record for the snapshot at `path`, if there is a sound one.
    pub(super) fn read(path: &Path) -> Option<Checked> {
        let mut file = open_regular(&Checked::path(path)?).ok()?;
        let mut bytes = [0u8; CHECKED_LEN + 1];
        let mut len = 0;
        while len < bytes.len() {
            match file.read(&mut bytes[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        let bytes = &bytes[..len];
        if len != CHECKED_LEN
            || &bytes[..8] != CHECKED_MAGIC
            || read_u64(bytes, CHECKED_LEN - 8)? != checksum(&bytes[..CHECKED_LEN - 8])
        {
            return None;
        }
        let u = |i: usize| read_u64(bytes, 8 + 8 * i);
        let i = |i: usize| u(i).map(|v| v as i64);
        Some(Checked {
            stamp: FileStamp {
                device: u(0)?,
                inode: u(1)?,
                size: u(2)?,
                modified: (i(3)?, i(4)?),
                changed: (i(5)?, i(6)?),
            },
            checksum: u(7)?,
        })
    }

    /// Whether this record vouches for a file now described by `meta`
    /// whose stored checksum is `checksum`.
    pub(super) fn vouches(&self, meta: &fs::Metadata, checksum: u64) -> bool {
        self.checksum == checksum && self.stamp == FileStamp::of(meta)
    }

    /// Checks the snapshot just written to `path` (with checksum `sum`) and
    /// leaves the record that vouches for it. Best effort: where it cannot
    /// be done (a file system whose times do not move on within a moment,
    /// say), no record is left and readers check the whole file.
    pub(super) fn record(path: &Path, sum: u64) {
        // Elsewhere there is no change time that no one can set back.
        if !cfg!(unix) {
            return;
        }
        let Some(target) = Checked::path(path) else {
            return;
        };
        if let (Some(dir), Some(name)) = (target.parent(), target.file_name()) {
            remove_stale_temps(dir, &name.to_string_lossy());
        }
        let Ok(meta) = fs::metadata(path) else {
            return;
        };
        let before = FileStamp::of(&meta);
        let _ = fs::remove_file(&target);
        let Ok((tmp, mut probe)) = create_temp(&target) else {
            return;
        };
        let recorded = (|| -> io::Result<bool> {
            // Readable by whoever may read the model.
            probe.set_permissions(meta.permissions())?;
            // Wait until the file system gives a change a later change time
            // than the snapshot's (its times are coarse: a change within
            // the same tick would keep it); setting the mode again is a
            // change. The file system's own clock decides, so a server's
            // clock that differs from ours cannot fool this.
            let mut later = false;
            for _ in 0..RECORD_WAIT_MS {
                probe.set_permissions(meta.permissions())?;
                if FileStamp::of(&probe.metadata()?).changed > before.changed {
                    later = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if !later {
                return Ok(false);
            }
            // From now on any change to the snapshot gets a new change
            // time; what it holds now is checked.
            let file = open_regular(path)?;
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            (&file).read_to_end(&mut bytes)?;
            let whole = bytes.len() >= 8
                && read_u64(&bytes, bytes.len() - 8) == Some(sum)
                && checksum(&bytes[..bytes.len() - 8]) == sum
                && FileStamp::of(&file.metadata()?) == before;
            if !whole {
                return Ok(false);
            }
            probe.write_all(
                &Checked {
                    stamp: before,
                    checksum: sum,
                }
                .encode(),
            )?;
            drop(probe);
            // Not synced: a record lost in a crash only costs a check.
            fs::rename(&tmp, &target)?;
            Ok(true)
        })();
        if !matches!(recorded, Ok(true)) {
            let _ = fs::remove_file(&tmp);
        }
    }
}

/// Leaves a new record beside the snapshot at `path` if the one there no
/// longer vouches for it (its mode was changed, a link added, the record
/// lost), after checking the file as it is now, so that readers stop
/// checking every byte of an unchanged model. For a writer holding the
/// database; best effort, and quick when the record is current.
pub fn refresh_checked(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        let Ok(file) = open_regular(path) else {
            return;
        };
        let Ok(meta) = file.metadata() else {
            return;
        };
        let mut tail = [0u8; 8];
        if meta.len() < MIN_LEN as u64 || file.read_exact_at(&mut tail, meta.len() - 8).is_err() {
            return;
        }
        let sum = u64::from_le_bytes(tail);
        if !Checked::read(path).is_some_and(|c| c.vouches(&meta, sum)) {
            Checked::record(path, sum);
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// How long [`Checked::record`] waits, at most, for the file system's
/// change times to move on (milliseconds): far more than the coarsest
/// tick of a local file system.
pub(super) const RECORD_WAIT_MS: usize = 100;

/// Memory for a whole model file: an anonymous mapping, populated in one
/// call, which costs less than taking a page fault for each page of a heap
/// buffer. A file of 2 MiB or more goes in huge pages where the system
/// gives them (transparent huge pages on Linux, on request): the window it
/// is read into starts on a 2 MiB boundary, so each 2 MiB of the file is
/// one page to clear and map instead of 512, which is much of what opening
/// a large model costs. Where huge pages are not to be had, the window is
/// populated with small pages as for a small file.
pub(super) struct Buffer {
    pub(super) map: memmap2::MmapMut,
    /// Where the file starts in `map`.
    pub(super) start: usize,
    pub(super) len: usize,
}

/// The size of a huge page where there are any (x86-64, and most aarch64
/// systems).
pub(super) const HUGE_PAGE: usize = 2 << 20;

impl Buffer {
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

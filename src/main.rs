//! The `bayesmail` command: parses the command line, runs one command from
//! the library, and maps the outcome to an exit code. All the work is in the
//! library; this binary only translates.
//!
//! The process starts at a C `main` of its own rather than Rust's: Rust's
//! start-up quietly reopens a closed standard stream on `/dev/null`, and
//! then a delivery hook started with its output closed would write the
//! message into nothing and report success. Here the standard streams are
//! checked first, exactly as the process got them; then what Rust's start-up
//! would do and we rely on is done by hand (SIGPIPE ignored, so a closed
//! pipe is a write error, not a silent death).
#![cfg_attr(not(test), no_main)]
// Without the C `main`, nothing calls into `cli` outside its own tests.
#![cfg_attr(test, allow(dead_code))]

mod cli;

/// Which standard streams (stdin, stdout, stderr) were closed when the
/// process started.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClosedStreams {
    /// Standard input was closed.
    pub stdin: bool,
    /// Standard output was closed.
    pub stdout: bool,
}

#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: fcntl(F_GETFD) only reads a descriptor's flags; it fails with
    // EBADF on a closed one. signal() with SIG_IGN installs no handler code.
    let closed = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1;
    let streams = ClosedStreams {
        stdin: closed(libc::STDIN_FILENO),
        stdout: closed(libc::STDOUT_FILENO),
    };
    let stderr_closed = closed(libc::STDERR_FILENO);
    // SAFETY: as above.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // A closed descriptor must not be reused by the next file we open (the
    // model, a mailbox) and then written to as if it were a stream: each is
    // taken by /dev/null now that it has been recorded.
    for (fd, was_closed) in [
        (libc::STDIN_FILENO, streams.stdin),
        (libc::STDOUT_FILENO, streams.stdout),
        (libc::STDERR_FILENO, stderr_closed),
    ] {
        if was_closed {
            // SAFETY: opening /dev/null takes the lowest free descriptor,
            // which is `fd` since the ones below it are open.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            debug_assert!(!closed(fd));
        }
    }
    one_arena_under_an_address_limit();
    // A panic must not unwind out of a C function (that aborts): it ends
    // the process as Rust's own start-up would, with status 101.
    // The arguments are taken from `argv` itself: only some C libraries
    // (glibc) also hand them to Rust's `std::env::args` when Rust's own
    // start-up does not run.
    let args = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            use std::os::unix::ffi::OsStrExt;
            // SAFETY: the C runtime passes `argc` valid, NUL-terminated
            // strings in `argv`, alive for the whole process.
            let arg = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            std::ffi::OsStr::from_bytes(arg.to_bytes()).to_owned()
        })
        .collect();
    let code = std::panic::catch_unwind(|| cli::main(streams, args)).unwrap_or(101);
    // Rust's start-up would flush stdout at exit; nothing else does here.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    libc::c_int::from(code)
}

/// Under a limit on the address space (Dovecot gives its mail processes,
/// and the programs they run, 256 MB: `default_vsz_limit`), each malloc
/// arena of glibc reserves 64 MB of it whatever it holds, and the count
/// store's threads each take one: `learn` from IMAP moves ran out of
/// memory at 256 MB and failed for good once its journal was full. There
/// one arena serves every thread. Called before any thread is started.
fn one_arena_under_an_address_limit() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct given; mallopt changes
        // the allocator's settings, with no thread running yet.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_AS, &mut limit) == 0
                && limit.rlim_cur != libc::RLIM_INFINITY
            {
                libc::mallopt(libc::M_ARENA_MAX, 1);
            }
        }
    }
}

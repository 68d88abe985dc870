//! The mbox reader on arbitrary files: draining it must not panic, and a
//! message written with `write_mbox_message` must read back as documented.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use bayesmail::mailbox::{self, MailboxKind, Options};
use libfuzzer_sys::fuzz_target;

/// The reader takes a path, so each fuzzing process has a file of its own.
static PATH: LazyLock<PathBuf> = LazyLock::new(|| {
    std::env::temp_dir().join(format!("bayesmail-fuzz-mbox-{}", std::process::id()))
});

fn read_all(bytes: &[u8]) -> Vec<mailbox::Result<mailbox::RawMessage>> {
    std::fs::write(&*PATH, bytes).expect("write temp mbox");
    match mailbox::open_as(&PATH, MailboxKind::Mbox, &Options::default()) {
        Ok(messages) => messages.collect(),
        // Not starting with "From " is a documented refusal, not a bug.
        Err(_) => Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    // Arbitrary bytes as an mbox file.
    read_all(data);

    // Arbitrary bytes as one message, written and read back.
    if data.is_empty() {
        return;
    }
    let mut mbox = Vec::new();
    mailbox::write_mbox_message(&mut mbox, None, data).expect("write to memory");
    let messages = read_all(&mbox);
    assert_eq!(
        messages.len(),
        1,
        "one message written, {} read",
        messages.len()
    );
    let read = &messages[0]
        .as_ref()
        .expect("message written reads back")
        .bytes;
    if data.ends_with(b"\n") {
        assert_eq!(read, data);
    } else {
        assert_eq!(&read[..read.len() - 1], data);
        assert_eq!(read.last(), Some(&b'\n'));
    }
});

//! `message::parse` on arbitrary bytes: it must not panic, must accept every
//! input that is not blank, and must give valid text.
#![no_main]

use bayesmail::message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let blank = data.iter().all(u8::is_ascii_whitespace);
    match message::parse(data) {
        Ok(msg) => {
            assert!(!blank, "blank input parsed");
            // CRLF becomes LF and the envelope line is dropped, never added to.
            assert!(msg.size <= data.len());
            for header in &msg.headers {
                assert!(std::str::from_utf8(header.name.as_bytes()).is_ok());
                assert!(std::str::from_utf8(header.value.as_bytes()).is_ok());
            }
            for part in &msg.parts {
                assert!(std::str::from_utf8(part.text.as_bytes()).is_ok());
            }
            let _ = msg.subject();
        }
        Err(message::Error::Empty) => assert!(blank, "non-blank input rejected"),
    }
});

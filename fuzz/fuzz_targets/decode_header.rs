//! `message::decode::header_value_steps` on arbitrary bytes: it must not
//! panic, must give valid text, and must take at most `STEPS_PER_BYTE` steps
//! per input byte (a header of many `=?` once took minutes to decode). Run
//! it with `-timeout=` so a slow input counts as a failure too.
#![no_main]

use bayesmail::message::decode::{STEPS_PER_BYTE, header_value_steps};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, steps) = header_value_steps(data);
    assert!(std::str::from_utf8(text.as_bytes()).is_ok());
    assert!(
        steps <= STEPS_PER_BYTE * data.len().max(1),
        "{steps} steps for {} bytes",
        data.len()
    );
});

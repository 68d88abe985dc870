//! Hostile messages against the message and feature layer: every stage
//! linear in its input (work bounded by counted steps, never by a clock),
//! caps that keep the first text instead of hiding it, hidden HTML text in
//! its own namespace, and a bound on the tokens one message contributes.

use bayesmail::message::decode::{STEPS_PER_BYTE, header_value_steps};

use crate::common::features;

/// About 4 MB of `=?utf-8?q?`, the encoded-word flood of issue 15 (F1).
fn flood() -> Vec<u8> {
    b"=?utf-8?q?".repeat(400_000)
}

#[test]
fn an_encoded_word_flood_decodes_in_linear_work() {
    let value = flood();
    let (text, steps) = header_value_steps(&value);
    assert_eq!(text.len(), value.len(), "nothing in the flood is a word");
    assert!(
        steps <= STEPS_PER_BYTE * value.len(),
        "{steps} steps for {} bytes",
        value.len()
    );
}

#[test]
fn an_encoded_word_flood_anywhere_leaves_the_body_readable() {
    let f = flood();
    let cat = |parts: &[&[u8]]| parts.concat();
    for raw in [
        cat(&[b"From: a@b\nSubject: ", &f, b"\n\nbodyword\n"]),
        cat(&[
            b"From: a@b\nContent-Type: text/plain; name=\"",
            &f,
            b"\"\n\nbodyword\n",
        ]),
        cat(&[
            b"Content-Type: multipart/mixed; boundary=B\n\n--B\nContent-Type: text/plain; x=",
            &f,
            b"\nContent-Disposition: inline; filename=",
            &f,
            b"\nContent-Transfer-Encoding: ",
            &f,
            b"\n\nbodyword\n--B--\n",
        ]),
        cat(&[
            b"Content-Type: message/rfc822\n\nSubject: ",
            &f,
            b"\n\nbodyword\n",
        ]),
    ] {
        assert!(features(&raw).tokens.contains("bodyword"));
    }
    // Many parameters (mailparse's parameter parser is quadratic in them).
    let mut raw = b"Content-Type: text/plain".to_vec();
    for i in 0..300_000 {
        raw.extend_from_slice(format!(";a{i}*0*=x").as_bytes());
    }
    raw.extend_from_slice(b"\n\nbodyword\n");
    assert!(features(&raw).tokens.contains("bodyword"));
}

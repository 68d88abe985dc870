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

/// The body tokens (no namespace) of a message.
fn body_tokens(raw: &[u8]) -> Vec<String> {
    features(raw)
        .tokens
        .iter()
        .filter(|t| !t.contains(':'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_long_prefix_without_text_does_not_hide_the_body() {
    let comment = format!("<!--{}-->", "x".repeat(2_200_000));
    let blank = "\n".repeat(2_200_000);
    for raw in [
        format!("Content-Type: text/html\n\n{comment}\n<p>bodyword</p>\n"),
        format!("Content-Type: text/plain\n\n{blank}bodyword\n"),
        format!(
            "Content-Type: text/plain\nContent-Transfer-Encoding: quoted-printable\n\n{blank}bodyword\n"
        ),
    ] {
        let tokens = body_tokens(raw.as_bytes());
        assert!(tokens.contains(&"bodyword".to_owned()), "{tokens:?}");
    }
}

#[test]
fn a_text_part_marked_as_attachment_is_read_when_there_is_no_other_text() {
    for disposition in [
        "attachment; filename=\"note.txt\"",
        "attachment",
        "attachment; filename=x.html",
    ] {
        let raw = format!(
            "Content-Type: multipart/mixed; boundary=B\n\n--B\nContent-Type: text/plain\n\n\n\
             --B\nContent-Type: text/plain; name=\"note.txt\"\nContent-Disposition: {disposition}\n\n\
             bodyword\n--B--\n"
        );
        let tokens = body_tokens(raw.as_bytes());
        assert!(
            tokens.contains(&"bodyword".to_owned()),
            "{disposition}: {tokens:?}"
        );
    }
    // With text of its own, the message's attachment stays an attachment.
    let raw =
        b"Content-Type: multipart/mixed; boundary=B\n\n--B\nContent-Type: text/plain\n\nhello\n\
        --B\nContent-Type: text/plain\nContent-Disposition: attachment; filename=\"a.txt\"\n\n\
        attached\n--B--\n";
    let f = features(raw);
    assert!(f.tokens.contains("hello") && !f.tokens.contains("attached"));
    assert!(f.tokens.contains("ATT:txt"));
}

#[test]
fn deeply_forwarded_messages_still_give_text() {
    let mut raw = b"Subject: inner\n\nbodyword\n".to_vec();
    for _ in 0..12 {
        raw = [&b"Content-Type: message/rfc822\n\n"[..], &raw].concat();
    }
    let tokens = body_tokens(&raw);
    assert!(tokens.contains(&"bodyword".to_owned()), "{tokens:?}");
}

#[test]
fn a_long_link_host_still_gives_its_registrable_domain() {
    let long = "a".repeat(45);
    let raw = format!(
        "Content-Type: text/html\n\n<a href=\"http://{long}.spam-shop.example/x\">y</a>\n\
         see http://{long}.other-shop.example/ now\n"
    );
    let f = features(raw.as_bytes());
    assert!(f.tokens.contains("URL:spam-shop.example"), "{:?}", f.tokens);
    assert!(
        f.tokens.contains("URL:other-shop.example"),
        "{:?}",
        f.tokens
    );
    let raw = format!("Content-Type: text/plain\n\nsee http://{long}.com/ now\n");
    assert!(features(raw.as_bytes()).tokens.contains("URL:long-host"));
}

#[test]
fn one_message_contributes_a_bounded_number_of_tokens() {
    use bayesmail::features::{MAX_TOKENS, STRUCTURE_TOKENS};
    let mut raw = b"From: a@b.example\nSubject: many\n\nfirstword ".to_vec();
    for i in 0..200_000 {
        raw.extend_from_slice(format!("w{i:x}z ").as_bytes());
    }
    let f = features(&raw);
    let n = f.tokens.len();
    assert!(
        (MAX_TOKENS - STRUCTURE_TOKENS..=MAX_TOKENS).contains(&n),
        "{n} tokens"
    );
    // The first text and the sender's tokens are kept.
    for t in [
        "firstword",
        "FROM:a@b.example",
        "SUBJ:many",
        "CT:text/plain",
    ] {
        assert!(f.tokens.contains(t), "missing {t}");
    }
}

/// A letters-only word for `i` (digits would be folded into a shape token).
fn filler_word(i: usize) -> String {
    let mut word = String::from("hid");
    let mut n = i;
    for _ in 0..4 {
        word.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
    }
    word
}

#[test]
fn hidden_html_filler_goes_to_its_own_namespace() {
    let filler: Vec<String> = (0..1200).map(filler_word).collect();
    let filler_text = filler.join(" ");
    assert!(filler_text.len() >= 9 * 1024);
    let raw = format!(
        "From: a@b.example\nSubject: offer\nContent-Type: text/html\n\n\
         <html><body><p>cheap pills</p>\
         <div style=\"DISPLAY : None\">{filler_text}</div>\
         <table><tr><td><span style='font-size:0px'>hidzzz</td>\
         <td>order today</td></tr></table>\
         <p hidden>hidyyy</p><font style=\"visibility:hidden\">hidxxx</font>\
         </body></html>\n"
    );
    let f = features(raw.as_bytes());
    let body = body_tokens(raw.as_bytes());
    for word in ["cheap", "pills", "order", "today"] {
        assert!(
            body.iter().any(|t| t == word),
            "{word} not in body: {body:?}"
        );
    }
    let leaked: Vec<&String> = body.iter().filter(|t| t.starts_with("hid")).collect();
    assert!(
        leaked.is_empty(),
        "{} hidden words in the body, first {:?}",
        leaked.len(),
        leaked.first()
    );
    for word in filler
        .iter()
        .map(String::as_str)
        .chain(["hidzzz", "hidyyy", "hidxxx"])
    {
        assert!(
            f.tokens.contains(&format!("HID:{word}")),
            "missing HID:{word}"
        );
    }
}

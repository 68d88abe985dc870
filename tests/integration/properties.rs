//! Property tests over the whole feature pipeline.

use bayesmail::features::Extractor;
use bayesmail::tokenize::MAX_TOKEN_LEN;
use proptest::prelude::*;

use crate::common::{features, sample_files, to_crlf};

#[test]
fn sample_messages_and_their_crlf_twins_have_identical_features() {
    for file in sample_files() {
        let lf = std::fs::read(&file).unwrap();
        assert!(
            !lf.contains(&b'\r'),
            "{} should be stored with LF",
            file.display()
        );
        assert_eq!(features(&lf), features(&to_crlf(&lf)), "{}", file.display());
    }
}

/// A generated message: headers, a body in one of several encodings and
/// structures.
fn message() -> impl Strategy<Value = Vec<u8>> {
    let word = "[A-Za-z0-9éü€$.,!'-]{1,12}";
    let line = prop::collection::vec(word, 0..12).prop_map(|w| w.join(" "));
    let body = prop::collection::vec(line, 0..20);
    (
        prop::collection::vec(word, 0..6),
        body,
        0..5usize,
        prop::sample::select(vec!["utf-8", "iso-8859-1", "windows-1252", "us-ascii"]),
    )
        .prop_map(|(subject, body, kind, charset)| {
            let subject = subject.join(" ");
            let text = body.join("\n");
            let mut m = format!(
                "From: Someone <someone@example.org>\nTo: you@example.net\nSubject: {subject}\n\
                 Date: Mon, 7 Oct 2002 10:00:00 +0000\nMIME-Version: 1.0\n"
            );
            match kind {
                0 => m.push_str(&format!("Content-Type: text/plain; charset={charset}\n\n{text}\n")),
                1 => {
                    let qp: String = text
                        .bytes()
                        .map(|b| if b.is_ascii() && b != b'=' { (b as char).to_string() } else { format!("={b:02X}") })
                        .collect();
                    m.push_str(&format!(
                        "Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n\n{qp}\n"
                    ));
                }
                2 => {
                    let b64 = base64(text.as_bytes());
                    m.push_str(&format!(
                        "Content-Type: text/html; charset=utf-8\nContent-Transfer-Encoding: base64\n\n{b64}\n"
                    ));
                }
                3 => m.push_str(&format!(
                    "Content-Type: multipart/alternative; boundary=\"BB\"\n\n--BB\nContent-Type: text/plain\n\n{text}\n\
                     --BB\nContent-Type: text/html\n\n<p>{text}</p><a href=\"http://x.example/\">x</a>\n--BB--\n"
                )),
                _ => m.push_str(&format!("\n{text}\n")),
            }
            m.into_bytes()
        })
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for (i, chunk) in bytes.chunks(3).enumerate() {
        if i > 0 && i % 19 == 0 {
            out.push('\n');
        }
        let n = chunk.len();
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= n {
                out.push(A[(v >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn check_tokens(tokens: &bayesmail::tokenize::TokenList) -> Result<(), TestCaseError> {
    let tokens = tokens.to_vec();
    for t in &tokens {
        prop_assert!(!t.is_empty());
        prop_assert!(
            t.len() <= MAX_TOKEN_LEN,
            "token of {} bytes: {t:?}",
            t.len()
        );
    }
    prop_assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not sorted and unique"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A message and its CRLF twin give identical features.
    #[test]
    fn crlf_twins_agree(msg in message()) {
        let mut ex = Extractor::new();
        let lf = ex.extract(&msg).unwrap();
        let crlf = ex.extract(&to_crlf(&msg)).unwrap();
        prop_assert_eq!(&lf, &crlf);
        check_tokens(&lf.tokens)?;
    }

    /// Arbitrary bytes never panic the parser or tokenizer, and no token is
    /// longer than the limit.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        if let Ok(f) = Extractor::new().extract(&bytes) {
            check_tokens(&f.tokens)?;
            prop_assert!(f.metadata.0.iter().all(|v| v.is_finite()));
        }
    }

    /// Arbitrary bytes behind plausible MIME headers reach the decoders.
    #[test]
    fn arbitrary_bodies_never_panic(
        ctype in prop::sample::select(vec!["text/plain", "text/html", "multipart/mixed; boundary=b", "message/rfc822", "application/pdf"]),
        cte in prop::sample::select(vec!["base64", "quoted-printable", "8bit", "x-unknown"]),
        charset in prop::sample::select(vec!["utf-8", "koi8-r", "iso-2022-jp", "gb2312", "bogus"]),
        body in prop::collection::vec(any::<u8>(), 0..4096),
    ) {
        let mut raw = format!(
            "Subject: =?{charset}?B?AAEC/w==?=\nContent-Type: {ctype}; charset={charset}\nContent-Transfer-Encoding: {cte}\n\n"
        ).into_bytes();
        raw.extend_from_slice(&body);
        let f = Extractor::new().extract(&raw).unwrap();
        check_tokens(&f.tokens)?;
    }

    /// Arbitrary text through the tokenizer alone.
    #[test]
    fn arbitrary_text_tokenizes_within_limits(text in "\\PC{0,400}") {
        let mut set = bayesmail::tokenize::TokenSet::default();
        bayesmail::tokenize::Analyzer::new().tokenize(&text, "SUBJ:", &mut set);
        check_tokens(&set.finish())?;
    }
}

use bayesmail::store::Snapshot;
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let snap = Snapshot::open(std::path::Path::new(&path)).unwrap();
    let snap = if let Some(out) = std::env::args().nth(2) {
        let h: serde_json::Value = snap.header().unwrap();
        let all: Vec<(String, bayesmail::model::TokenCounts)> =
            snap.iter().map(|(t, c)| (t.into_owned(), c)).collect();
        bayesmail::store::write_snapshot(std::path::Path::new(&out), &h, all).unwrap();
        println!("size {}", std::fs::metadata(&out).unwrap().len());
        Snapshot::open(std::path::Path::new(&out)).unwrap()
    } else {
        snap
    };
    let mut words: Vec<String> = snap
        .iter()
        .map(|(t, _)| t.into_owned())
        .filter(|t| !t.starts_with('\u{1}'))
        .collect();
    // shuffle deterministically
    let mut x: u64 = 88172645463325252;
    for i in (1..words.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        words.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let misses: Vec<String> = words.iter().map(|w| format!("{w}\u{2}")).collect();
    for (name, set) in [("hit", &words), ("miss", &misses)] {
        let mut best = f64::MAX;
        let mut found = 0;
        for _ in 0..7 {
            let t = Instant::now();
            found = 0;
            for w in set.iter() {
                if snap.lookup(w).is_some() {
                    found += 1;
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{name}: {} lookups, {found} found, {:.1} ns each",
            set.len(),
            best * 1e9 / set.len() as f64
        );
    }
    let t = Instant::now();
    let mut s = 0u64;
    for _ in 0..20 {
        for b in 0..1u32 << 18 {
            if let Some(c) = snap.gram(b) {
                s += c.ham as u64;
            }
        }
    }
    println!(
        "gram: {:.1} ns each ({s})",
        t.elapsed().as_secs_f64() * 1e9 / 20.0 / 262144.0
    );
}

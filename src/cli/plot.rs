//! `eval --plot DIR`: the pictures of an evaluation, as SVG (plotters'
//! SVG backend; no fonts or bitmaps are linked, the viewer draws the text).
//!
//! - `roc.svg`: the ROC curve as the TREC spam track draws it, ham
//!   misclassification (false-positive rate) against spam misclassification
//!   (false-negative rate), both on log axes so the region that matters for
//!   mail, FPR well under 1%, is not squashed into a corner.
//! - `reliability.svg`: the reliability diagram of the calibrated P(spam),
//!   the observed fraction of spam against the mean predicted probability
//!   in ten equal-width bins (the bins of the report's ECE), with the
//!   diagonal a perfectly calibrated filter would follow.
//!
//! The figures come from the pooled scores only (`Scored`: probability and
//! true label), so any protocol can be plotted.

use std::path::Path;

use anyhow::{Context as _, Result, anyhow};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use bayesmail::eval::Scored;

/// Pixel size of each picture.
const SIZE: (u32, u32) = (720, 540);

/// Equal-width bins of the reliability diagram; the report's ECE uses ten.
const BINS: usize = 10;

/// One point of the ROC curve: the error rates when every message scored at
/// or above some threshold is called spam.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RocPoint {
    /// Ham called spam, fraction of ham.
    pub fpr: f64,
    /// Spam called ham, fraction of spam.
    pub fnr: f64,
}

/// The ROC curve, from the strictest threshold (nothing is spam: FPR 0,
/// FNR 1) to the laxest (everything is spam: FPR 1, FNR 0), one point per
/// distinct score. Empty when either class is missing.
pub(super) fn roc(scored: &[Scored]) -> Vec<RocPoint> {
    let n_spam = scored.iter().filter(|s| s.is_spam).count();
    let n_ham = scored.len() - n_spam;
    if n_spam == 0 || n_ham == 0 {
        return Vec::new();
    }
    let mut sorted: Vec<(f64, bool)> = scored.iter().map(|s| (s.probability, s.is_spam)).collect();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut points = vec![RocPoint { fpr: 0.0, fnr: 1.0 }];
    let (mut fp, mut tp) = (0usize, 0usize);
    let mut i = 0;
    while i < sorted.len() {
        // A tie group moves together: one threshold cannot split it.
        let score = sorted[i].0;
        while i < sorted.len() && sorted[i].0 == score {
            if sorted[i].1 {
                tp += 1;
            } else {
                fp += 1;
            }
            i += 1;
        }
        points.push(RocPoint {
            fpr: fp as f64 / n_ham as f64,
            fnr: (n_spam - tp) as f64 / n_spam as f64,
        });
    }
    points
}

/// One non-empty bin of the reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bin {
    /// Mean predicted P(spam) of the messages in the bin.
    pub predicted: f64,
    /// Fraction of them that are spam.
    pub observed: f64,
    /// Messages in the bin.
    pub count: usize,
}

/// The non-empty bins of `bins` equal-width bins of P(spam), in order.
pub(super) fn reliability(scored: &[Scored], bins: usize) -> Vec<Bin> {
    let mut sum = vec![0.0; bins];
    let mut spam = vec![0usize; bins];
    let mut count = vec![0usize; bins];
    for s in scored {
        if !s.probability.is_finite() {
            continue;
        }
        let b = ((s.probability.clamp(0.0, 1.0) * bins as f64) as usize).min(bins - 1);
        sum[b] += s.probability;
        spam[b] += usize::from(s.is_spam);
        count[b] += 1;
    }
    (0..bins)
        .filter(|&b| count[b] > 0)
        .map(|b| Bin {
            predicted: sum[b] / count[b] as f64,
            observed: spam[b] as f64 / count[b] as f64,
            count: count[b],
        })
        .collect()
}

/// Writes `roc.svg` and `reliability.svg` into `dir` (created if missing);
/// returns their paths.
pub(super) fn write(dir: &Path, scored: &[Scored]) -> Result<[std::path::PathBuf; 2]> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let roc_path = dir.join("roc.svg");
    let rel_path = dir.join("reliability.svg");
    draw_roc(&roc_path, scored).with_context(|| format!("writing {}", roc_path.display()))?;
    draw_reliability(&rel_path, scored)
        .with_context(|| format!("writing {}", rel_path.display()))?;
    Ok([roc_path, rel_path])
}

/// plotters' drawing errors carry the backend's error type; ours is text.
fn drawing<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("{e}")
}

/// A percentage for an axis label: no float noise, no trailing zeros.
fn percent_label(v: &f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// The lowest power of ten at or below `x`.
fn decade_below(x: f64) -> f64 {
    10f64.powf(x.log10().floor())
}

fn draw_roc(path: &Path, scored: &[Scored]) -> Result<()> {
    let n_spam = scored.iter().filter(|s| s.is_spam).count();
    let n_ham = scored.len() - n_spam;
    let points = roc(scored);
    // A rate of zero has no place on a log axis: it is drawn at half a
    // message, the smoothing lam% uses, and the axis starts a decade below.
    let floor_x = 100.0 * 0.5 / n_ham.max(1) as f64;
    let floor_y = 100.0 * 0.5 / n_spam.max(1) as f64;
    // Just under the decade, so the decade's own label is drawn.
    let (lo_x, lo_y) = (0.999 * decade_below(floor_x), 0.999 * decade_below(floor_y));
    let auc = bayesmail::eval::auc(
        &scored
            .iter()
            .map(|s| (s.probability, s.is_spam))
            .collect::<Vec<_>>(),
    );
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(drawing)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "ROC: {n_ham} ham, {n_spam} spam, (1-AUC)% = {:.4}",
                100.0 * (1.0 - auc)
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo_x..100.0).log_scale(), (lo_y..100.0).log_scale())
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc("ham misclassified (FPR, log scale; none is drawn at half a message)")
        .y_desc("spam misclassified (FNR, log scale)")
        .x_label_formatter(&percent_label)
        .y_label_formatter(&percent_label)
        .draw()
        .map_err(drawing)?;
    let clamp = |p: &RocPoint| ((100.0 * p.fpr).max(floor_x), (100.0 * p.fnr).max(floor_y));
    // Equal error rate line, for reference: where FPR = FNR.
    let lo = lo_x.max(lo_y);
    chart
        .draw_series(LineSeries::new(
            [(lo, lo), (100.0, 100.0)],
            ShapeStyle::from(&RGBColor(170, 170, 170)).stroke_width(1),
        ))
        .map_err(drawing)?
        .label("FPR = FNR")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RGBColor(170, 170, 170)));
    chart
        .draw_series(LineSeries::new(
            points.iter().map(clamp),
            ShapeStyle::from(&BLUE).stroke_width(2),
        ))
        .map_err(drawing)?
        .label("bayesmail")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    // The operating point: the rates at the configured costs' verdicts.
    let fp = scored
        .iter()
        .filter(|s| !s.is_spam && s.verdict == bayesmail::decision::Verdict::Spam)
        .count();
    let fn_ = scored
        .iter()
        .filter(|s| s.is_spam && s.verdict == bayesmail::decision::Verdict::Ham)
        .count();
    if n_ham > 0 && n_spam > 0 {
        let op = clamp(&RocPoint {
            fpr: fp as f64 / n_ham as f64,
            fnr: fn_ as f64 / n_spam as f64,
        });
        chart
            .draw_series(std::iter::once(Circle::new(op, 5, RED.filled())))
            .map_err(drawing)?
            .label("operating point (unsure not counted as errors)")
            .legend(|(x, y)| Circle::new((x + 10, y), 4, RED.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(drawing)?;
    root.present().map_err(drawing)?;
    Ok(())
}

fn draw_reliability(path: &Path, scored: &[Scored]) -> Result<()> {
    let bins = reliability(scored, BINS);
    let pairs: Vec<(f64, bool)> = scored.iter().map(|s| (s.probability, s.is_spam)).collect();
    let ece = bayesmail::eval::ece(&pairs, BINS);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(drawing)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Reliability: {} messages, ECE = {ece:.4}", scored.len()),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..1.0, 0.0..1.0)
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc("predicted P(spam), mean of the bin")
        .y_desc("observed fraction of spam")
        .light_line_style(WHITE)
        .draw()
        .map_err(drawing)?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, 0.0), (1.0, 1.0)],
            ShapeStyle::from(&RGBColor(170, 170, 170)).stroke_width(1),
        ))
        .map_err(drawing)?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RGBColor(170, 170, 170)));
    // The bins' edges, faintly, so a reader sees which points share a bin.
    for b in 1..BINS {
        let x = b as f64 / BINS as f64;
        chart
            .draw_series(LineSeries::new(
                [(x, 0.0), (x, 1.0)],
                RGBColor(235, 235, 235),
            ))
            .map_err(drawing)?;
    }
    chart
        .draw_series(LineSeries::new(
            bins.iter().map(|b| (b.predicted, b.observed)),
            ShapeStyle::from(&BLUE).stroke_width(2),
        ))
        .map_err(drawing)?
        .label("bayesmail (n = messages in the bin)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    // Point area grows with the bin's share, so an empty-looking bin with
    // three messages does not look as weighty as one with thousands.
    let total = scored.len().max(1) as f64;
    chart
        .draw_series(bins.iter().map(|b| {
            let r = 3.0 + 9.0 * (b.count as f64 / total).sqrt();
            Circle::new((b.predicted, b.observed), r as i32, BLUE.filled())
        }))
        .map_err(drawing)?;
    chart
        .draw_series(bins.iter().map(|b| {
            // Centred above the point (below it at the top edge): bins
            // are a tenth of the width apart, so neighbours' labels never
            // meet.
            let dy = if b.observed > 0.9 { -0.045 } else { 0.045 };
            // At the side edges the label leans inwards, not off the plot.
            let (h, dx) = match b.predicted {
                p if p < 0.06 => (HPos::Left, 0.015),
                p if p > 0.94 => (HPos::Right, -0.015),
                _ => (HPos::Center, 0.0),
            };
            let style =
                TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(h, VPos::Center));
            Text::new(
                format!("n={}", b.count),
                (b.predicted + dx, b.observed + dy),
                style,
            )
        }))
        .map_err(drawing)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(drawing)?;
    root.present().map_err(drawing)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bayesmail::decision::Verdict;

    fn scored(pairs: &[(f64, bool)]) -> Vec<Scored> {
        pairs
            .iter()
            .enumerate()
            .map(|(index, &(probability, is_spam))| Scored {
                index,
                is_spam,
                log_odds: 0.0,
                probability,
                verdict: Verdict::Unsure,
            })
            .collect()
    }

    #[test]
    fn roc_by_hand() {
        // Ham 0.1, 0.6; spam 0.6, 0.9. Thresholds: 0.9 → (0, ½); 0.6 (the
        // tie moves together) → (½, 0); 0.1 → (1, 0).
        let s = scored(&[(0.1, false), (0.6, false), (0.6, true), (0.9, true)]);
        let fpr_fnr: Vec<(f64, f64)> = roc(&s).iter().map(|p| (p.fpr, p.fnr)).collect();
        assert_eq!(fpr_fnr, [(0.0, 1.0), (0.0, 0.5), (0.5, 0.0), (1.0, 0.0)]);
        assert!(roc(&scored(&[(0.5, true)])).is_empty());
    }

    #[test]
    fn reliability_by_hand() {
        // Bin [0.1,0.2): 0.1, 0.15, one spam. Bin [0.9,1]: 0.95, 1.0, spam.
        let s = scored(&[(0.1, false), (0.15, true), (0.95, true), (1.0, true)]);
        let bins = reliability(&s, 10);
        assert_eq!(bins.len(), 2);
        assert!((bins[0].predicted - 0.125).abs() < 1e-12);
        assert_eq!((bins[0].observed, bins[0].count), (0.5, 2));
        assert!((bins[1].predicted - 0.975).abs() < 1e-12);
        assert_eq!((bins[1].observed, bins[1].count), (1.0, 2));
    }

    #[test]
    fn labels_have_no_float_noise() {
        assert_eq!(percent_label(&0.1), "0.1%");
        assert_eq!(percent_label(&100.0), "100%");
        assert_eq!(percent_label(&0.010000000000000002), "0.01%");
        assert_eq!(decade_below(0.05), 0.01);
    }
}

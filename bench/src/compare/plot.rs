//! SVG latency-percentile plot (plotters, SVG backend): two panels, open-loop GET and GET P1,
//! one line per target; x = percentile on a "nines" scale (log10(1 / (1 − p))), y = µs, log.

use plotters::prelude::*;

use super::metrics::Summary;

/// x coordinate of a percentile (e.g. 99.9 → 3.0).
pub fn nines(percentile: f64) -> f64 {
    (1.0 / (1.0 - percentile / 100.0)).log10()
}

/// Tick label of an x coordinate: 1.0 → "p90", 3.0 → "p99.9".
fn label(x: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let s = format!("{:.3}", p.max(0.0));
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("p{s}")
}

/// Renders the two panels from the medians; returns the SVG text.
pub fn render(medians: &[Summary]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1200, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let panels = root.split_evenly((1, 2));
        let specs = [
            (
                "open-loop",
                "GET open loop (50 connections): latency from intended send time",
            ),
            ("get-p1", "GET P1 closed loop (50 connections)"),
        ];
        for (area, (case, title)) in panels.iter().zip(specs) {
            let series: Vec<(&str, Vec<(f64, f64)>)> = medians
                .iter()
                .filter(|s| s.case == case)
                .map(|s| {
                    let pts = s
                        .latency_curve_us
                        .iter()
                        .filter(|(p, v)| *p <= 99.99 && *v > 0.0)
                        .map(|&(p, v)| (nines(p), v))
                        .collect();
                    (s.target.as_str(), pts)
                })
                .collect();
            let values = series.iter().flat_map(|(_, p)| p.iter().map(|x| x.1));
            let (lo, hi) = values.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
            let (lo, hi) = if hi > 0.0 {
                (lo * 0.8, hi * 1.25)
            } else {
                (1.0, 10_000.0)
            };
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..4.2f64, (lo..hi).log_scale())
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_desc("percentile (log scale of nines)")
                .x_labels(6)
                .y_desc("latency µs")
                .x_label_formatter(&|x| label(*x))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .draw()
                .map_err(|e| e.to_string())?;
            if series.is_empty() {
                continue;
            }
            for (i, (name, pts)) in series.into_iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_scale() {
        assert!((nines(90.0) - 1.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert_eq!(label(1.0), "p90");
        assert_eq!(label(3.0), "p99.9");
        assert_eq!(label(nines(50.0)), "p50");
    }

    #[test]
    fn renders_svg_without_data() {
        let svg = render(&[]).unwrap();
        assert!(svg.starts_with("<svg"));
    }
}

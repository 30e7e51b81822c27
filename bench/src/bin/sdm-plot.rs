//! sdm-plot: SVG plots of round trip, throughput and start-up against the number of ranks,
//! one line per system, from the JSON lines `bench/run-macro.sh` and `bench/hosts-bench.sh`
//! write (see `sdm_bench::results`). Each file FILE.jsonl gives OUT/FILE-rtt.svg,
//! OUT/FILE-throughput.svg and OUT/FILE-startup.svg, for the figures it holds.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};
use clap::Parser;
use plotters::prelude::*;
use sdm_bench::results::{Figure, Results, Series};

/// SVG plots of benchmark results against the number of ranks.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// The directory the SVG files go to (made if missing).
    #[arg(long, default_value = "bench/plots")]
    out: PathBuf,
    /// Results files: the JSON lines of bench/run-macro.sh or bench/hosts-bench.sh.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// One colour per line, in the order of the series.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    std::fs::create_dir_all(&cli.out)
        .with_context(|| format!("cannot make {}", cli.out.display()))?;
    for file in &cli.files {
        let results = Results::read(file)?;
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .with_context(|| format!("{}: not a file name", file.display()))?;
        let mut made = 0;
        for figure in Figure::ALL {
            let series = results.medians(figure);
            if series.is_empty() {
                continue;
            }
            let path = cli.out.join(format!("{stem}-{}.svg", figure.name()));
            draw(&path, figure, &stem, &series)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("{}", path.display());
            made += 1;
        }
        ensure!(
            made > 0,
            "{}: no startup, rtt or throughput runs to plot",
            file.display()
        );
    }
    Ok(())
}

/// Draws one figure's series, log-log, medians joined by lines; a series that does not
/// depend on the ranks (the relay of hosts-bench) is a dashed level across the plot.
fn draw(
    path: &Path,
    figure: Figure,
    source: &str,
    series: &[(Series, Vec<(u32, f64)>)],
) -> anyhow::Result<()> {
    let ranks = |flat: bool| {
        series
            .iter()
            .filter(move |(s, _)| s.is_flat() == flat)
            .flat_map(|(_, p)| p.iter().map(|&(n, _)| f64::from(n).log2()))
    };
    // The x axis is log2 of the ranks (ticks at powers of two, where the sizes are).
    let (mut x0, mut x1) = bounds(ranks(false));
    if x0 > x1 {
        (x0, x1) = bounds(ranks(true));
    }
    let (x0, x1) = (x0 - 0.6, x1 + 0.6);
    let (y0, y1) = bounds(series.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y)));
    // Throughput falls with the ranks, the others rise: the legend goes in a band of its
    // own where the lines are not.
    let (legend, y0, y1) = match figure {
        Figure::Throughput => (SeriesLabelPosition::LowerLeft, y0 / 8.0, y1 * 1.5),
        Figure::RoundTrip | Figure::Startup => (SeriesLabelPosition::UpperLeft, y0 / 1.5, y1 * 8.0),
    };

    let root = SVGBackend::new(path, (720, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{} against ranks ({source})", figure.axis()),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, (y0..y1).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("ranks")
        .y_desc(figure.axis())
        .light_line_style(TRANSPARENT)
        .x_labels(((x1 - x0) as usize).max(2) + 1)
        .y_labels(15)
        .x_label_formatter(&|x| {
            // Only whole powers of two are labelled.
            if (x - x.round()).abs() < 1e-9 {
                short(x.exp2())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| short(*y))
        .draw()?;
    // A relay of S processes takes the colour of sdm on S servers, which it is compared with.
    let mut keys: Vec<Series> = Vec::new();
    for (s, points) in series {
        let key = match *s {
            Series::RelayOf(k) => Series::Servers(k),
            other => other,
        };
        let i = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
            keys.push(key);
            keys.len() - 1
        });
        let colour = COLOURS[i % COLOURS.len()];
        let style = colour.stroke_width(if s.is_flat() { 1 } else { 2 });
        let drawn = if s.is_flat() {
            let level = points.iter().map(|&(_, y)| y).sum::<f64>() / points.len() as f64;
            let line = [(x0, level), (x1, level)];
            chart.draw_series(DashedLineSeries::new(line, 8, 6, style))?
        } else {
            let line: Vec<(f64, f64)> = points
                .iter()
                .map(|&(n, y)| (f64::from(n).log2(), y))
                .collect();
            chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
            chart.draw_series(LineSeries::new(line, style))?
        };
        drawn
            .label(s.to_string())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(legend)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The smallest and largest of some positive values (`(inf, -inf)` for none).
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// A tick label: three significant digits at most, no trailing zeros.
fn short(v: f64) -> String {
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

//! The last hour's runs as inline SVG: a small sparkline per topic on the overview, and a
//! larger chart, with a time axis (minutes ago), the peak minutes labelled and a legend, for
//! all topics summed at the top of the overview and for one topic on its page. Done runs go up
//! from the middle line and failed ones down, one bar a minute.
//!
//! The SVG is drawn from numbers only: no text of the store (a topic, an id) goes into its
//! string, so nothing there needs escaping, and no script is needed to draw it.

use std::time::UNIX_EPOCH;

use dq_core::{MinuteTally, Throughput};
use maud::{html, Markup, PreEscaped};

/// Minutes an hour's chart shows.
const MINUTES: u64 = 60;

/// The last hour as a small bar chart: done above the line, failed below, one bar a minute.
pub(crate) fn sparkline(hour: &Throughput) -> Markup {
    const W: u64 = 180;
    const H: u64 = 28;
    let most = peak(hour);
    let bar = |n: u64| (n * (H / 2)).div_ceil(most);
    let mut bars = String::new();
    for (_, slot, m) in slots(hour) {
        let x = slot * W / MINUTES;
        if m.done > 0 {
            let h = bar(m.done);
            bars.push_str(&format!(
                r#"<rect class="done" x="{x}" y="{}" width="2" height="{h}"/>"#,
                H / 2 - h
            ));
        }
        if m.failed > 0 {
            bars.push_str(&format!(
                r#"<rect class="failed" x="{x}" y="{}" width="2" height="{}"/>"#,
                H / 2,
                bar(m.failed)
            ));
        }
    }
    let label = format!("last hour: {} done, {} failed", hour.done(), hour.failed());
    html! {
        svg.chart viewBox={ "0 0 " (W) " " (H) } width=(W) height=(H) role="img" aria-label=(label) {
            title { (label) }
            line.axis x1="0" y1=(H / 2) x2=(W) y2=(H / 2) {}
            // Numbers only, formatted above: nothing from the store is in this string.
            (PreEscaped(bars))
        }
    }
}

// The larger chart's geometry, in SVG units: the legend on top, the plot below it, the time
// axis under the plot.
/// The plot's left edge (the scale's numbers are left of it).
const LEFT: u64 = 44;
/// A minute's width: its bar and the gap after it.
const SLOT: u64 = 10;
/// The middle line: done bars go up from it, failed ones down.
const MIDDLE: u64 = 100;
/// The tallest bar.
const HALF: u64 = 66;
/// The whole chart.
const WIDTH: u64 = LEFT + SLOT * MINUTES + 16;
const HEIGHT: u64 = 194;

/// What a larger chart shows: all topics summed (the overview) or one topic (its page). Fixed
/// words, never a name from the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    EveryTopic,
    Topic,
}

impl Scope {
    fn class(self) -> &'static str {
        match self {
            Scope::EveryTopic => "chart hour overall",
            Scope::Topic => "chart hour topic",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Scope::EveryTopic => "every topic",
            Scope::Topic => "this topic",
        }
    }
}

/// The last hour, larger: a bar a minute (done up, failed down) on a time axis from 60 minutes
/// ago to now, the scale's peak on the left, the busiest minute of each kind labelled with its
/// count, and a legend with the hour's totals and peaks.
pub(crate) fn hour_chart(hour: &Throughput, scope: Scope) -> Markup {
    let (done, failed) = (hour.done(), hour.failed());
    let most_done = hour.minutes.iter().map(|m| m.done).max().unwrap_or(0);
    let most_failed = hour.minutes.iter().map(|m| m.failed).max().unwrap_or(0);
    let label = format!(
        "{}, last hour: {done} done, {failed} failed; at most {most_done} done and {most_failed} failed in a minute",
        scope.words()
    );
    let mut svg = String::new();
    legend(&mut svg, done, most_done, failed, most_failed);
    axes(&mut svg, peak(hour));
    bars(&mut svg, hour);
    html! {
        svg class=(scope.class()) viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } width=(WIDTH) height=(HEIGHT)
            role="img" aria-label=(label) data-done=(done) data-failed=(failed)
            data-peak-done=(most_done) data-peak-failed=(most_failed) {
            title { (label) }
            // Numbers and fixed words only, formatted below: nothing from the store.
            (PreEscaped(svg))
        }
    }
}

/// The legend above the plot: what each colour is, with the hour's total and peak minute.
fn legend(svg: &mut String, done: u64, most_done: u64, failed: u64, most_failed: u64) {
    let x = LEFT + SLOT * MINUTES / 2;
    svg.push_str(&format!(
        r#"<rect class="done" x="{LEFT}" y="6" width="10" height="10"/><text class="legend" x="{}" y="15">done: {done} in the hour, peak {most_done}/min</text>"#,
        LEFT + 14
    ));
    svg.push_str(&format!(
        r#"<rect class="failed" x="{x}" y="6" width="10" height="10"/><text class="legend" x="{}" y="15">failed: {failed} in the hour, peak {most_failed}/min</text>"#,
        x + 14
    ));
}

/// The middle line, the scale (`most` runs a minute at the tallest bar, up and down) and the
/// time axis: 60 and 30 minutes ago, and now.
fn axes(svg: &mut String, most: u64) {
    let (right, top, bottom) = (LEFT + SLOT * MINUTES, MIDDLE - HALF, MIDDLE + HALF);
    for y in [top, bottom] {
        svg.push_str(&format!(
            r#"<line class="grid" x1="{LEFT}" y1="{y}" x2="{right}" y2="{y}"/>"#
        ));
    }
    svg.push_str(&format!(
        r#"<line class="axis" x1="{LEFT}" y1="{MIDDLE}" x2="{right}" y2="{MIDDLE}"/>"#
    ));
    let scale_x = LEFT - 4;
    for (y, n) in [(top + 4, most), (MIDDLE + 4, 0), (bottom + 4, most)] {
        svg.push_str(&format!(
            r#"<text class="scale" x="{scale_x}" y="{y}" text-anchor="end">{n}</text>"#
        ));
    }
    let ticks_y = bottom + 20;
    for (x, anchor, words) in [
        (LEFT, "start", "-60 min"),
        (LEFT + SLOT * MINUTES / 2, "middle", "-30 min"),
        (right, "end", "now"),
    ] {
        svg.push_str(&format!(
            r#"<line class="axis" x1="{x}" y1="{bottom}" x2="{x}" y2="{}"/><text class="time" x="{x}" y="{ticks_y}" text-anchor="{anchor}">{words}</text>"#,
            bottom + 5
        ));
    }
}

/// A bar a minute, and the count over (or under) the busiest minute of each kind.
fn bars(svg: &mut String, hour: &Throughput) {
    let most = peak(hour);
    let bar = |n: u64| (n * HALF).div_ceil(most);
    // The first minute with the most runs of each kind (none when the hour has none).
    let busiest = |count: fn(&MinuteTally) -> u64| {
        let max = hour.minutes.iter().map(count).max().filter(|n| *n > 0)?;
        hour.minutes.iter().position(|m| count(m) == max)
    };
    let (busiest_done, busiest_failed) = (busiest(|m| m.done), busiest(|m| m.failed));
    for (i, slot, m) in slots(hour) {
        let x = LEFT + slot * SLOT + 1;
        let centre = x + (SLOT - 2) / 2;
        if m.done > 0 {
            let h = bar(m.done);
            let y = MIDDLE - h;
            svg.push_str(&format!(
                r#"<rect class="done" x="{x}" y="{y}" width="{}" height="{h}"/>"#,
                SLOT - 2
            ));
            if busiest_done == Some(i) {
                svg.push_str(&format!(
                    r#"<text class="peak" x="{centre}" y="{}" text-anchor="middle">{}</text>"#,
                    y - 3,
                    m.done
                ));
            }
        }
        if m.failed > 0 {
            let h = bar(m.failed);
            svg.push_str(&format!(
                r#"<rect class="failed" x="{x}" y="{MIDDLE}" width="{}" height="{h}"/>"#,
                SLOT - 2
            ));
            if busiest_failed == Some(i) {
                svg.push_str(&format!(
                    r#"<text class="peak" x="{centre}" y="{}" text-anchor="middle">{}</text>"#,
                    MIDDLE + h + 11,
                    m.failed
                ));
            }
        }
    }
}

/// The most runs of one kind in a minute of the hour: the scale's top (at least 1).
fn peak(hour: &Throughput) -> u64 {
    hour.minutes
        .iter()
        .map(|m| m.done.max(m.failed))
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The hour's last 60 minutes, each with its index in the hour and its slot on the chart: the
/// last minute (now) in the last slot.
fn slots(hour: &Throughput) -> impl Iterator<Item = (usize, u64, &MinuteTally)> {
    let n = hour.minutes.len();
    let skipped = n.saturating_sub(MINUTES as usize);
    hour.minutes
        .iter()
        .enumerate()
        .skip(skipped)
        .map(move |(i, m)| (i, MINUTES - (n - i) as u64, m))
}

/// The hours of several topics summed minute by minute. Each was read at its own moment, so
/// they are matched by minute, up to the latest minute any of them reached.
pub(crate) fn summed<'a>(hours: impl IntoIterator<Item = &'a Throughput>) -> Throughput {
    let mut now_minute = 0;
    let mut tallies = Vec::new();
    for hour in hours {
        for m in &hour.minutes {
            let minute = m
                .minute
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() / 60);
            now_minute = now_minute.max(minute);
            tallies.push((minute, m.done, m.failed));
        }
    }
    if tallies.is_empty() {
        return Throughput::default();
    }
    Throughput::from_tallies(now_minute, tallies)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;

    /// An hour ending at minute `now` with `(minutes ago, done, failed)` tallies.
    fn hour(now: u64, tallies: &[(u64, u64, u64)]) -> Throughput {
        Throughput::from_tallies(now, tallies.iter().map(|&(ago, d, f)| (now - ago, d, f)))
    }

    #[test]
    fn hours_read_a_minute_apart_are_summed_minute_by_minute() {
        let a = hour(1000, &[(0, 2, 1), (59, 7, 0)]);
        let b = hour(1001, &[(0, 3, 0), (1, 1, 4)]);
        let all = summed([&a, &b]);
        assert_eq!(all.minutes.len(), 60);
        let last = all.minutes[59];
        assert_eq!(last.minute, UNIX_EPOCH + Duration::from_secs(1001 * 60));
        assert_eq!((last.done, last.failed), (3, 0), "minute 1001: b's");
        assert_eq!((all.minutes[58].done, all.minutes[58].failed), (3, 5));
        // a's minute 941 is over an hour before minute 1001: it is out.
        assert_eq!((all.done(), all.failed()), (6, 5));
        assert_eq!(summed(Vec::<&Throughput>::new()), Throughput::default());
    }

    #[test]
    fn the_larger_chart_labels_its_totals_peaks_and_time_axis() {
        let h = hour(5000, &[(0, 4, 0), (10, 9, 2), (30, 9, 0), (59, 0, 3)]);
        let svg = hour_chart(&h, Scope::Topic).into_string();
        assert!(
            svg.contains(
                "this topic, last hour: 22 done, 5 failed; at most 9 done and 3 failed in a minute"
            ),
            "{svg}"
        );
        assert!(svg.contains(r#"data-done="22""#) && svg.contains(r#"data-failed="5""#));
        for words in [
            ">-60 min<",
            ">-30 min<",
            ">now<",
            "done: 22 in the hour, peak 9/min",
            "failed: 5 in the hour, peak 3/min",
        ] {
            assert!(svg.contains(words), "{words}: {svg}");
        }
        // The busiest minutes are labelled once each: 9 done (the earlier of two), 3 failed.
        assert_eq!(svg.matches(r#"class="peak""#).count(), 2, "{svg}");
        // One bar per minute with runs: 3 done, 2 failed.
        assert_eq!(svg.matches(r#"<rect class="done" x"#).count() - 1, 3);
        assert_eq!(svg.matches(r#"<rect class="failed" x"#).count() - 1, 2);
        // Now is the last slot: the bar of 4 done ends at the plot's right edge.
        let last_x = LEFT + (MINUTES - 1) * SLOT + 1;
        assert!(svg.contains(&format!(r#"x="{last_x}""#)), "{svg}");
    }

    #[test]
    fn an_hour_without_runs_draws_no_bar_and_no_peak() {
        let quiet = hour(5000, &[]);
        let svg = hour_chart(&quiet, Scope::EveryTopic).into_string();
        assert!(
            svg.contains("every topic, last hour: 0 done, 0 failed"),
            "{svg}"
        );
        assert!(!svg.contains(r#"class="peak""#), "{svg}");
        assert_eq!(
            svg.matches("<rect").count(),
            2,
            "the legend's two squares only"
        );
    }
}

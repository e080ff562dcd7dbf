//! Draws a [`View`] with ratatui widgets: the same code paints the live terminal and the
//! `--once` text frame (ratatui's `TestBackend`).

use ratatui::Frame;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use super::view::{Unit, View};

/// Size of the `--once` frame, columns × rows.
pub const ONCE_SIZE: (u16, u16) = (120, 40);

/// Requests/s with a precision that fits a narrow column.
fn rate(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn latency(v: Option<u64>, unit: Unit) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v} {}", unit.suffix()))
}

fn uptime(s: i64) -> String {
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}h{m:02}m")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// Paints `view` over the whole frame: header, per-command table, per-host table.
pub fn draw(f: &mut Frame<'_>, view: &View) {
    let host_rows = u16::try_from(view.hosts.len()).unwrap_or(u16::MAX);
    let [head, cmds, hosts] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(6),
        Constraint::Length(host_rows.saturating_add(3).min(16)),
    ])
    .areas(f.area());

    let s = &view.summary;
    let err = s
        .error_ratio
        .map_or_else(|| "-".to_owned(), |r| format!("{:.2}%", r * 100.0));
    let line1 = format!(
        "admin {}   uptime {}   interval {:.1}s",
        s.admin,
        s.uptime_s.map_or_else(|| "unknown".to_owned(), uptime),
        s.interval_s
    );
    let line2 = format!(
        "total {} req/s   errors {}   downstream cx active {}",
        rate(s.rps),
        err,
        s.cx_active
    );
    let mut lines = vec![Line::from(line1), Line::from(line2)];
    if let Some(e) = &view.error {
        lines[0] = Line::from(format!("error: {e}"));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" respite top (q: quit) ")),
        head,
    );

    let bold = Style::default().add_modifier(Modifier::BOLD);
    let header = Row::new([
        "listener", "command", "req/s", "err/s", "err %", "p50", "p99",
    ])
    .style(bold);
    let rows = view.commands.iter().map(|c| {
        let pct = if c.rps > 0.0 {
            format!("{:.2}", c.errors_per_s / c.rps * 100.0)
        } else {
            "-".to_owned()
        };
        Row::new([
            c.prefix.clone(),
            c.command.clone(),
            rate(c.rps),
            rate(c.errors_per_s),
            pct,
            latency(c.p50, c.unit),
            latency(c.p99, c.unit),
        ])
    });
    let widths = [
        Constraint::Length(16),
        Constraint::Length(24),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(10),
    ];
    f.render_widget(
        Table::new(rows, widths).header(header).block(
            Block::bordered().title(" commands (interval p50/p99 of command.<cmd>.latency) "),
        ),
        cmds,
    );

    let header = Row::new([
        "cluster", "host", "health", "cx", "req/s", "err/s", "p50", "p99",
    ])
    .style(bold);
    let rows = view.hosts.iter().map(|h| {
        Row::new([
            h.cluster.clone(),
            h.host.clone(),
            h.health.clone(),
            h.cx_active.to_string(),
            rate(h.rps),
            rate(h.errors_per_s),
            latency(h.p50_us, Unit::Micros),
            latency(h.p99_us, Unit::Micros),
        ])
    });
    let widths = [
        Constraint::Length(16),
        Constraint::Length(24),
        Constraint::Length(10),
        Constraint::Length(5),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(10),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(" upstream hosts (interval p50/p99 of rq_time) ")),
        hosts,
    );
}

/// `view` rendered into a `width` × `height` text frame, one line per row, trailing spaces cut.
///
/// # Errors
/// Drawing into the in-memory backend failed (not expected).
pub fn to_text(view: &View, width: u16, height: u16) -> Result<String, String> {
    let mut term =
        Terminal::new(TestBackend::new(width, height)).map_err(|e| format!("render: {e}"))?;
    term.draw(|f| draw(f, view))
        .map_err(|e| format!("render: {e}"))?;
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::view::{CommandRow, HostRow, Summary};
    use super::*;

    #[test]
    fn frame_shows_every_figure_with_units() {
        let view = View {
            summary: Summary {
                admin: "127.0.0.1:9901".into(),
                uptime_s: Some(3725),
                rps: 1234.0,
                error_ratio: Some(0.0125),
                cx_active: 7,
                interval_s: 1.0,
            },
            commands: vec![CommandRow {
                prefix: "main".into(),
                command: "get".into(),
                rps: 1000.0,
                errors_per_s: 12.5,
                p50: Some(120),
                p99: Some(950),
                unit: Unit::Micros,
            }],
            hosts: vec![HostRow {
                cluster: "cache".into(),
                host: "127.0.0.1:6379".into(),
                health: "healthy".into(),
                cx_active: 2,
                rps: 1000.0,
                errors_per_s: 0.0,
                p50_us: Some(80),
                p99_us: None,
            }],
            error: None,
        };
        let text = to_text(&view, ONCE_SIZE.0, ONCE_SIZE.1).unwrap();
        println!("{text}");
        assert_eq!(text.lines().count(), 40);
        assert!(text.contains("admin 127.0.0.1:9901   uptime 01:02:05"));
        assert!(text.contains("total 1234 req/s   errors 1.25%   downstream cx active 7"));
        let get = text.lines().find(|l| l.contains(" get ")).unwrap();
        for want in ["main", "1000", "12.5", "1.25", "120 µs", "950 µs"] {
            assert!(get.contains(want), "{want} missing in {get:?}");
        }
        let host = text.lines().find(|l| l.contains("127.0.0.1:6379")).unwrap();
        for want in ["cache", "healthy", "80 µs", "-"] {
            assert!(host.contains(want), "{want} missing in {host:?}");
        }
    }
}

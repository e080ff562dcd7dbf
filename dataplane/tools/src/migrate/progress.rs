//! The progress bar on stderr: keys done of the total, keys/s and ETA. Hidden when stderr is
//! not a terminal, so logs and test output stay clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// A progress bar over `total` keys labelled `what` (`verify`, `copy`).
pub fn bar(total: u64, what: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    let template = format!(
        "{what} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} keys {{keys_per_sec}} ETA {{eta}} {{msg}}"
    );
    if let Ok(style) = ProgressStyle::with_template(&template) {
        // indicatif's own {per_sec} prints four decimals; whole keys/s read better.
        let style = style.with_key(
            "keys_per_sec",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} keys/s", state.per_sec());
            },
        );
        bar.set_style(style);
    }
    bar
}

//! The typed renderer against the one it replaced, which built each table key by key from
//! strings. `golden.txt` holds the text that renderer produced for every render of the
//! translation tests (`### <test>#<n>` before the n-th render of a test, counted from 0): each
//! render of these tests must parse into the same config as that text, or be refused with the
//! same key and message (what a NACK says).
//!
//! A render without a recorded counterpart (a test written after the recording) is not
//! compared. Values that belong to the machine running the tests are recorded as a
//! placeholder (`${PATH}`, the one environment variable a test reads) and filled in here, so
//! the recording holds on every machine.

use std::cell::Cell;

const RECORDED: &str = include_str!("golden.txt");
const HEADER: &str = "### ";

thread_local! {
    /// Renders so far in this test (libtest runs each test on a thread of its own).
    static RENDERS: Cell<usize> = const { Cell::new(0) };
}

/// The recorded text of render `n` of `test`, with this machine's values filled in.
fn recorded(test: &str, n: usize) -> Option<String> {
    let header = format!("{HEADER}{test}#{n}\n");
    let start = RECORDED.find(&header)? + header.len();
    let rest = &RECORDED[start..];
    let text = rest.find(HEADER).map_or(rest, |end| &rest[..end]);
    Some(text.replace("${PATH}", &std::env::var("PATH").unwrap_or_default()))
}

/// A config's meaning: what the data plane builds from it, or its refusal without location.
fn meaning(text: &str) -> Result<respite::config::Config, String> {
    respite::config::parse_pushed(text, "golden").map_err(|e| e.reason())
}

/// Compares `text`, just rendered, with the recorded text of the same render.
pub fn check(text: &str) {
    let thread = std::thread::current();
    let Some(test) = thread.name().filter(|t| t.starts_with("translate::")) else {
        return;
    };
    let n = RENDERS.with(|r| r.replace(r.get() + 1));
    let Some(old) = recorded(test, n) else {
        return;
    };
    assert_eq!(
        meaning(text),
        meaning(&old),
        "render #{n} of {test} means something else than before:\n{text}\n--- recorded:\n{old}"
    );
}

/// The lookup relies on libtest naming each test's thread after the test's path.
#[test]
fn recordings_are_found_by_test_thread_names() {
    assert_eq!(
        std::thread::current().name(),
        Some("translate::tests_golden::recordings_are_found_by_test_thread_names")
    );
    assert!(recorded("translate::tests::envoy_documentation_example", 0).is_some());
    assert_eq!(RECORDED.matches(HEADER).count(), 106);
}

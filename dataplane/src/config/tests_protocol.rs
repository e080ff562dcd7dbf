//! The listener key `protocol_version`.

use super::tests::{MINIMAL, assert_err};
use super::*;

fn with(line: &str) -> String {
    MINIMAL.replacen(
        "op_timeout = \"1s\"",
        &format!("op_timeout = \"1s\"\n{line}"),
        1,
    )
}

#[test]
fn protocol_version_values() {
    let c = parse(MINIMAL, "t.toml").unwrap();
    assert_eq!(c.listeners[0].protocol_version, None);
    let c = parse(&with("protocol_version = \"resp3\""), "t.toml").unwrap();
    assert_eq!(
        c.listeners[0].protocol_version,
        Some(ProtocolVersion::Resp3)
    );
    let c = parse(&with("protocol_version = \"resp2\""), "t.toml").unwrap();
    assert_eq!(
        c.listeners[0].protocol_version,
        Some(ProtocolVersion::Resp2)
    );
}

#[test]
fn protocol_version_unknown_value_names_key_and_line() {
    assert_err(
        &with("protocol_version = \"RESP3\""),
        5,
        "listeners[0].protocol_version",
        "unknown variant `RESP3`",
    );
    assert_err(
        &with("protocol_version = 3"),
        5,
        "listeners[0].protocol_version",
        "",
    );
}

//! `/config_dump`: the live config snapshot as pretty JSON.
//!
//! The shape is the config model's own serialization (TOML key names; durations as humantime
//! strings such as `"1s"`; addresses as `"ip:port"`), not Envoy's typed `configs[]`: Respite has
//! one model, and this is it. Every secret (upstream `auth_password`, listener
//! `downstream_auth_passwords`) is [`crate::config::REDACTED`]; see `config/dump.rs`.

use super::{JSON_CONTENT_TYPE, Reply, text};
use crate::config::Config;

/// `GET /config_dump`.
pub(super) fn render(config: &Config) -> Reply {
    match serde_json::to_string_pretty(config) {
        Ok(mut body) => {
            body.push('\n');
            Reply {
                status: 200,
                content_type: JSON_CONTENT_TYPE,
                body,
            }
        }
        // Only a non-finite float (none passes validation) could fail to serialize.
        Err(e) => text(500, format!("config does not serialize: {e}\n")),
    }
}

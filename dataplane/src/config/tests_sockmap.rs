//! `[sockmap]` and the CLI port list: what parses, and the error each mistake gets.

use std::path::PathBuf;

use super::tests::assert_err;
use super::*;

/// A minimal config under a `[sockmap]` table whose body is `body` (starting on line 2).
fn with(body: &str) -> String {
    format!(
        "[sockmap]\n{body}\n[[listeners]]\nname = \"main\"\naddress = \"127.0.0.1:6380\"\n\
         op_timeout = \"1s\"\n[listeners.prefix_routes.catch_all_route]\ncluster = \"c\"\n\
         [[clusters]]\nname = \"c\"\nhosts = [\"127.0.0.1:7001\"]\n"
    )
}

fn sockmap(body: &str) -> Sockmap {
    match parse(&with(body), "t.toml") {
        Ok(c) => c.sockmap,
        Err(e) => panic!("{body:?} does not parse: {e}"),
    }
}

#[test]
fn absent_table_is_all_off() {
    let c = parse(&with("").replacen("[sockmap]\n", "", 1), "t.toml").expect("parses");
    assert_eq!(c.sockmap, Sockmap::default());
    assert_eq!(
        c.sockmap,
        Sockmap {
            enabled: false,
            cgroup: None,
            ports: vec![],
            upstreams: false,
            bpffs: None,
        }
    );
    // An empty table too.
    assert_eq!(sockmap(""), Sockmap::default());
}

#[test]
fn the_contract_example_parses() {
    let s = sockmap(
        "enabled = true\ncgroup = \"/sys/fs/cgroup/unified/respite\"\n\
         ports = [6379, \"7000-7005\", \" 8000 - 8000 \", 65535, 1]\nupstreams = true\n\
         bpffs = \"/sys/fs/bpf\"",
    );
    assert_eq!(
        s,
        Sockmap {
            enabled: true,
            cgroup: Some(PathBuf::from("/sys/fs/cgroup/unified/respite")),
            ports: vec![
                (6379, 6379),
                (7000, 7005),
                (8000, 8000),
                (65535, 65535),
                (1, 1)
            ],
            upstreams: true,
            bpffs: Some(PathBuf::from("/sys/fs/bpf")),
        }
    );
}

#[test]
fn config_dump_shows_the_table() {
    let c = parse(
        &with("enabled = true\nports = [6379, \"7000-7005\"]"),
        "t.toml",
    )
    .expect("parses");
    let v = serde_json::to_value(&c).expect("serializes");
    assert_eq!(
        v["sockmap"],
        serde_json::json!({
            "enabled": true,
            "cgroup": null,
            "ports": [[6379, 6379], [7000, 7005]],
            "upstreams": false,
            "bpffs": null,
        })
    );
}

#[test]
fn bad_ports_name_the_element_and_line() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "ports = [0]",
            "sockmap.ports[0]",
            "\"0\": port 0 is outside 1-65535",
        ),
        (
            "ports = [80, 65536]",
            "sockmap.ports[1]",
            "\"65536\": port 65536 is outside 1-65535",
        ),
        (
            "ports = [-1]",
            "sockmap.ports[0]",
            "port -1 is outside 1-65535",
        ),
        (
            "ports = [\"7005-7000\"]",
            "sockmap.ports[0]",
            "\"7005-7000\": the range is reversed (write \"7000-7005\")",
        ),
        (
            "ports = [\"0-10\"]",
            "sockmap.ports[0]",
            "\"0-10\": port 0 is outside 1-65535",
        ),
        (
            "ports = [\"http\"]",
            "sockmap.ports[0]",
            "\"http\" is not a port or a range",
        ),
        (
            "ports = [\"6379,6380\"]",
            "sockmap.ports[0]",
            "one port or range per element",
        ),
        ("ports = [\"\"]", "sockmap.ports[0]", "empty item"),
        (
            "ports = [\"1-\"]",
            "sockmap.ports[0]",
            "\"1-\" is not a port",
        ),
    ];
    for (body, key, fragment) in cases {
        assert_err(&with(body), 2, key, fragment);
    }
}

#[test]
fn bad_shapes_and_unknown_keys_name_the_key_and_line() {
    assert_err(
        &with("bogus = 1"),
        2,
        "sockmap.bogus",
        "unknown field `bogus`",
    );
    assert_err(
        &with("enabled = \"yes\""),
        2,
        "sockmap.enabled",
        "invalid type",
    );
    assert_err(&with("ports = 6379"), 2, "sockmap.ports", "invalid type");
    assert_err(
        &with("ports = [1.5]"),
        2,
        "sockmap.ports[0]",
        "a port number",
    );
    assert_err(
        &with("upstreams = 1"),
        2,
        "sockmap.upstreams",
        "invalid type",
    );
    assert_err(&with("cgroup = 3"), 2, "sockmap.cgroup", "invalid type");
}

#[test]
fn paths_must_be_absolute_and_not_empty() {
    assert_err(
        &with("cgroup = \"\""),
        2,
        "sockmap.cgroup",
        "must not be empty",
    );
    assert_err(
        &with("cgroup = \"respite\""),
        2,
        "sockmap.cgroup",
        "\"respite\" must be an absolute path",
    );
    assert_err(
        &with("bpffs = \" \""),
        2,
        "sockmap.bpffs",
        "must not be empty",
    );
    assert_err(
        &with("bpffs = \"bpf\""),
        2,
        "sockmap.bpffs",
        "\"bpf\" must be an absolute path",
    );
}

#[test]
fn a_pushed_config_takes_the_table_too() {
    let c = parse_pushed("[sockmap]\nenabled = true\n", "control socket").expect("parses");
    assert!(c.sockmap.enabled);
    let e = parse_pushed("[sockmap]\nports = [0]\n", "control socket").expect_err("port 0");
    assert_eq!(
        e.to_string(),
        "control socket:2:10: sockmap.ports[0]: \"0\": port 0 is outside 1-65535"
    );
}

#[test]
fn port_list_accepts_the_cli_forms() {
    assert_eq!(
        parse_port_list("6379,7000-7005"),
        Ok(vec![(6379, 6379), (7000, 7005)])
    );
    assert_eq!(
        parse_port_list(" 1 , 65535, 10 - 12 ,5-5"),
        Ok(vec![(1, 1), (65535, 65535), (10, 12), (5, 5)])
    );
    assert_eq!(parse_port_list("80"), Ok(vec![(80, 80)]));
}

#[test]
fn port_list_rejections_quote_the_item() {
    let cases: &[(&str, &str)] = &[
        (
            "",
            "empty port list: expected ports or ranges like 6379,7000-7005",
        ),
        (
            " ",
            "empty port list: expected ports or ranges like 6379,7000-7005",
        ),
        (
            "6379,",
            "empty item in the port list: expected ports or ranges like 6379,7000-7005",
        ),
        ("0", "\"0\": port 0 is outside 1-65535"),
        ("65536", "\"65536\": port 65536 is outside 1-65535"),
        (
            "99999999999999999999",
            "\"99999999999999999999\" is not a port or a range: expected a port 1-65535 or \"a-b\"",
        ),
        (
            "+80",
            "\"+80\" is not a port or a range: expected a port 1-65535 or \"a-b\"",
        ),
        (
            "-5",
            "\"-5\" is not a port or a range: expected a port 1-65535 or \"a-b\"",
        ),
        (
            "1-2-3",
            "\"1-2-3\" is not a port or a range: expected a port 1-65535 or \"a-b\"",
        ),
        (
            "20-10",
            "\"20-10\": the range is reversed (write \"10-20\")",
        ),
        (
            "6379;6380",
            "\"6379;6380\" is not a port or a range: expected a port 1-65535 or \"a-b\"",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse_port_list(text), Err((*want).to_owned()), "{text:?}");
    }
}

//! `prefix_routes` and `faults`: what parses, and the error each mistake gets.

use std::time::Duration;

use super::tests::assert_err;
use super::*;

/// Routes over three clusters; line numbers matter to the error tests below.
const ROUTED: &str = r#"[[listeners]]
name = "main"
address = "127.0.0.1:6380"
op_timeout = "1s"
[listeners.prefix_routes]
case_insensitive = true
[[listeners.prefix_routes.routes]]
prefix = "user:"
cluster = "old"
remove_prefix = true
key_formatter = "{%KEY%}"
[listeners.prefix_routes.routes.read_command_policy]
cluster = "replica"
[[listeners.prefix_routes.routes.request_mirror_policy]]
cluster = "new"
exclude_read_commands = true
runtime_fraction = 25.5
[listeners.prefix_routes.catch_all_route]
cluster = "old"
[[listeners.faults]]
fault_type = "error"
fault_enabled = 10.0
commands = ["GET", "set"]
[[listeners.faults]]
fault_type = "delay"
fault_enabled = 50
delay = "20ms"
[[clusters]]
name = "old"
hosts = ["127.0.0.1:7001"]
[[clusters]]
name = "new"
hosts = ["127.0.0.1:7002"]
[[clusters]]
name = "replica"
hosts = ["127.0.0.1:7003"]
"#;

fn edit(from: &str, to: &str) -> String {
    assert!(ROUTED.contains(from), "{from:?} not in ROUTED");
    ROUTED.replacen(from, to, 1)
}

#[test]
fn routes_and_faults_parse() {
    let c = parse(ROUTED, "t.toml").expect("parses");
    let l = &c.listeners[0];
    assert_eq!(
        l.prefix_routes,
        PrefixRoutes {
            routes: vec![Route {
                prefix: "user:".into(),
                cluster: "old".into(),
                remove_prefix: true,
                key_formatter: Some("{%KEY%}".into()),
                request_mirror_policy: vec![MirrorPolicy {
                    cluster: "new".into(),
                    exclude_read_commands: true,
                    runtime_fraction: 25.5,
                }],
                read_command_policy: Some("replica".into()),
            }],
            case_insensitive: true,
            catch_all_route: Some(Route::catch_all("old")),
        }
    );
    assert_eq!(
        l.faults,
        vec![
            FaultConfig {
                fault_type: FaultType::Error,
                fault_enabled: 10.0,
                delay: None,
                commands: vec!["get".into(), "set".into()],
            },
            FaultConfig {
                fault_type: FaultType::Delay,
                fault_enabled: 50.0,
                delay: Some(Duration::from_millis(20)),
                commands: vec![],
            },
        ]
    );
    assert_eq!(clusters_of(&l.prefix_routes), vec!["old", "replica", "new"]);
}

#[test]
fn routes_without_catch_all() {
    let c = parse(
        &edit(
            "[listeners.prefix_routes.catch_all_route]\ncluster = \"old\"\n",
            "",
        ),
        "t.toml",
    )
    .expect("routes alone are enough");
    assert_eq!(c.listeners[0].prefix_routes.catch_all_route, None);
}

/// A mirror onto the route's own cluster, or onto another cluster sharing one of its servers,
/// is accepted (as in Envoy): every mirrored command reaches that server twice.
#[test]
fn mirror_onto_the_routes_own_cluster() {
    let c = parse(
        &edit("cluster = \"new\"\nexclude", "cluster = \"old\"\nexclude"),
        "t.toml",
    )
    .expect("a self-mirror is valid");
    let route = &c.listeners[0].prefix_routes.routes[0];
    assert_eq!(route.cluster, "old");
    assert_eq!(route.request_mirror_policy.len(), 1);
    assert_eq!(route.request_mirror_policy[0].cluster, "old");

    // Another cluster over one of the route's servers: accepted too.
    let c = parse(
        &edit(
            "name = \"new\"\nhosts = [\"127.0.0.1:7002\"]",
            "name = \"new\"\nhosts = [\"127.0.0.1:7009\", { address = \"127.0.0.1:7001\" }]",
        ),
        "t.toml",
    )
    .expect("a mirror sharing a server is valid");
    let route = &c.listeners[0].prefix_routes.routes[0];
    assert_eq!(route.request_mirror_policy[0].cluster, "new");
}

#[test]
fn route_errors() {
    assert_err(
        &edit(
            "runtime_fraction = 25.5\n",
            "runtime_fraction = 25.5\n[[listeners.prefix_routes.routes.request_mirror_policy]]\ncluster = \"new\"\n",
        ),
        19,
        "listeners[0].prefix_routes.routes[0].request_mirror_policy[1].cluster",
        "already a mirror of this route",
    );
    assert_err(
        &edit("runtime_fraction = 25.5", "runtime_fraction = 101.0"),
        17,
        "listeners[0].prefix_routes.routes[0].request_mirror_policy[0].runtime_fraction",
        "not a percentage between 0 and 100",
    );
    assert_err(
        &edit(
            "cluster = \"replica\"\n[[listeners.prefix",
            "cluster = \"gone\"\n[[listeners.prefix",
        ),
        13,
        "listeners[0].prefix_routes.routes[0].read_command_policy.cluster",
        "unknown cluster \"gone\"",
    );
    assert_err(
        &edit("key_formatter = \"{%KEY%}\"", "key_formatter = \"{%key%}\""),
        11,
        "listeners[0].prefix_routes.routes[0].key_formatter",
        "must contain %KEY%",
    );
    assert_err(
        &edit("prefix = \"user:\"", "prefix = \"\""),
        8,
        "listeners[0].prefix_routes.routes[0].prefix",
        "must not be empty",
    );
    assert_err(
        &edit(
            "prefix = \"user:\"",
            &format!("prefix = \"{}\"", "p".repeat(1001)),
        ),
        8,
        "listeners[0].prefix_routes.routes[0].prefix",
        "at most 1000 bytes",
    );
    // A second route whose prefix differs only by case, with case_insensitive on.
    assert_err(
        &edit(
            "[listeners.prefix_routes.catch_all_route]",
            "[[listeners.prefix_routes.routes]]\nprefix = \"USER:\"\ncluster = \"new\"\n[listeners.prefix_routes.catch_all_route]",
        ),
        19,
        "listeners[0].prefix_routes.routes[1].prefix",
        "prefix \"USER:\" already exists (routes[0], compared without case)",
    );
    assert_err(
        &edit(
            "cluster = \"old\"\n[[listeners.faults]]",
            "cluster = \"old\"\nremove_prefix = true\n[[listeners.faults]]",
        ),
        20,
        "listeners[0].prefix_routes.catch_all_route.remove_prefix",
        "no prefix to remove",
    );
}

#[test]
fn fault_errors() {
    assert_err(
        &edit(
            "commands = [\"GET\", \"set\"]",
            "commands = [\"GET\", \"ping\"]",
        ),
        23,
        "listeners[0].faults[0].commands[1]",
        "faults never apply to PING",
    );
    assert_err(
        &edit("commands = [\"GET\", \"set\"]", "commands = [\"AUTH\"]"),
        23,
        "listeners[0].faults[0].commands[0]",
        "faults never apply to AUTH",
    );
    assert_err(
        &edit("commands = [\"GET\", \"set\"]", "commands = [\"GETT\"]"),
        23,
        "listeners[0].faults[0].commands[0]",
        "unknown command \"GETT\"",
    );
    assert_err(
        &edit(
            "commands = [\"GET\", \"set\"]",
            "commands = [\"GET\", \"select\"]",
        ),
        23,
        "listeners[0].faults[0].commands[1]",
        "SELECT is answered by respite itself, never sent upstream",
    );
    // Of the transaction commands, EXEC draws a fault (the transaction as one request); the
    // others never would.
    let exec = parse(
        &edit("commands = [\"GET\", \"set\"]", "commands = [\"exec\"]"),
        "t.toml",
    )
    .expect("a fault on EXEC parses");
    assert_eq!(
        exec.listeners[0].faults[0].commands,
        vec!["exec".to_string()]
    );
    for name in ["MULTI", "DISCARD", "WATCH", "UNWATCH"] {
        assert_err(
            &edit(
                "commands = [\"GET\", \"set\"]",
                &format!("commands = [\"exec\", \"{name}\"]"),
            ),
            23,
            "listeners[0].faults[0].commands[1]",
            &format!("{name} is part of a transaction, which draws its faults at EXEC"),
        );
    }
    assert_err(
        &edit("fault_enabled = 10.0", "fault_enabled = -1.0"),
        22,
        "listeners[0].faults[0].fault_enabled",
        "not a percentage",
    );
    assert_err(
        &edit("delay = \"20ms\"\n", ""),
        24,
        "listeners[0].faults[1].delay",
        "a delay fault needs a delay greater than zero",
    );
    assert_err(
        &edit("fault_type = \"error\"", "fault_type = \"abort\""),
        21,
        "listeners[0].faults[0].fault_type",
        "unknown variant `abort`",
    );
}

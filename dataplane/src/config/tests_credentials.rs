//! `[[clusters.credentials]]`, a cluster's `db`, and the `SELECT` a listener answers.

use super::tests::{MINIMAL, assert_err};
use super::*;

#[test]
fn credentials_parse_in_order_and_pick_per_host() {
    let text = format!(
        "{MINIMAL}auth_password = \"cluster\"\n\
         [[clusters.credentials]]\naddress = \"127.0.0.1:7001\"\nauth_username = \"u1\"\nauth_password = \"p1\"\n\
         [[clusters.credentials]]\naddress = \"[::1]:7002\"\nauth_password = \"p2\"\n"
    );
    let c = parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let cl = &c.clusters[0];
    assert_eq!(
        cl.credentials,
        vec![
            CredentialConfig {
                address: CredentialAddress::Ip("127.0.0.1:7001".parse().unwrap()),
                auth_username: Some("u1".into()),
                auth_password: Some("p1".into()),
            },
            CredentialConfig {
                address: CredentialAddress::Ip("[::1]:7002".parse().unwrap()),
                auth_username: None,
                auth_password: Some("p2".into()),
            },
        ]
    );
    assert_eq!(
        cl.auth_for("127.0.0.1:7001".parse().unwrap(), None),
        Auth {
            username: Some("u1"),
            password: Some("p1")
        }
    );
    assert_eq!(
        cl.auth_for("127.0.0.1:7009".parse().unwrap(), None),
        Auth {
            username: None,
            password: Some("cluster")
        }
    );
    // The dump redacts every password and keeps the addresses.
    let dump = serde_json::to_string(&c.clusters[0]).unwrap();
    assert!(!dump.contains("p1") && !dump.contains("p2"), "{dump}");
    assert!(dump.contains("\"address\":\"127.0.0.1:7001\""), "{dump}");
    assert_eq!(cl.db, 0);
}

#[test]
fn dns_names_match_on_dns_clusters_only() {
    let dns = MINIMAL.replace(
        "hosts = [\"127.0.0.1:7001\"]",
        "type = \"strict_dns\"\nhosts = [\"node-1.redis.svc:7001\"]",
    );
    let text = format!(
        "{dns}[[clusters.credentials]]\naddress = \"Node-1.redis.svc:7001\"\nauth_password = \"n\"\n"
    );
    let c = parse(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let cl = &c.clusters[0];
    assert_eq!(
        cl.credentials[0].address,
        CredentialAddress::Name {
            host: "node-1.redis.svc".into(),
            port: 7001
        }
    );
    let a = "10.1.2.3:7001".parse().unwrap();
    assert_eq!(cl.auth_for(a, Some("node-1.redis.svc")).password, Some("n"));
    assert_eq!(cl.auth_for(a, Some("node-2.redis.svc")).password, None);
    assert_err(
        &format!("{MINIMAL}[[clusters.credentials]]\naddress = \"node-1.redis.svc:7001\"\n"),
        11,
        "clusters[0].credentials[0].address",
        "\"strict_dns\" or \"logical_dns\" only",
    );
}

#[test]
fn bad_credentials_name_their_key() {
    assert_err(
        &format!("{MINIMAL}[[clusters.credentials]]\naddress = \"127.0.0.1\"\n"),
        11,
        "clusters[0].credentials[0].address",
        "expected host:port",
    );
    assert_err(
        &format!(
            "{MINIMAL}[[clusters.credentials]]\naddress = \"127.0.0.1:1\"\nauth_username = \"u\"\n"
        ),
        12,
        "clusters[0].credentials[0].auth_username",
        "requires auth_password",
    );
    assert_err(
        &format!(
            "{MINIMAL}[[clusters.credentials]]\naddress = \"127.0.0.1:1\"\n\
             [[clusters.credentials]]\naddress = \"127.0.0.1:1\"\n"
        ),
        13,
        "clusters[0].credentials[1].address",
        "duplicate address 127.0.0.1:1 (also clusters[0].credentials[0].address)",
    );
    assert_err(
        &format!(
            "{MINIMAL}[[clusters.credentials]]\naddress = \"127.0.0.1:1\"\npassword = \"x\"\n"
        ),
        12,
        "clusters[0].credentials[0].password",
        "unknown field `password`",
    );
}

#[test]
fn db_is_kept_refused_on_redis_cluster_and_answers_select() {
    let c = parse(&format!("{MINIMAL}db = 3\n"), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.clusters[0].db, 3);
    assert_eq!(c.listeners[0].select_db, Some(3));
    let c = parse(MINIMAL, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.listeners[0].select_db, Some(0));
    let rc = MINIMAL.replace(
        "hosts = [\"127.0.0.1:7001\"]",
        "type = \"redis_cluster\"\nhosts = [\"127.0.0.1:7001\"]\ndb = 1",
    );
    assert_err(
        &rc,
        11,
        "clusters[0].db",
        "Redis Cluster has database 0 only",
    );
    // Two clusters of one listener with different databases: no SELECT is answered +OK.
    let two = format!(
        "{}db = 2\n[[clusters]]\nname = \"other\"\nhosts = [\"127.0.0.1:7002\"]\n",
        MINIMAL.replace(
            "[listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n",
            "[[listeners.prefix_routes.routes]]\nprefix = \"o:\"\ncluster = \"other\"\n\
             [listeners.prefix_routes.catch_all_route]\ncluster = \"cache\"\n",
        )
    );
    let c = parse(&two, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.listeners[0].select_db, None);
}

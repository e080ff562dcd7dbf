//! `[listeners.tls]` and `[clusters.tls]`: files read at load, errors naming the file and key,
//! and a rotated file making a different snapshot.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use super::tests::assert_err;
use super::tls_testing::Pki;
use super::*;

fn config(listener_tls: &str, cluster_tls: &str) -> String {
    format!(
        r#"[[listeners]]
name = "main"
address = "127.0.0.1:6380"
op_timeout = "1s"
[listeners.prefix_routes.catch_all_route]
cluster = "cache"
{listener_tls}
[[clusters]]
name = "cache"
hosts = ["127.0.0.1:7001"]
{cluster_tls}
"#
    )
}

fn listener_tls(chain: &Path, key: &Path, extra: &str) -> String {
    format!(
        "[listeners.tls]\ncertificate_chain = {:?}\nprivate_key = {:?}\n{extra}",
        chain.display().to_string(),
        key.display().to_string()
    )
}

#[test]
fn a_listener_and_a_cluster_with_tls_load_with_their_files() {
    let pki = Pki::new();
    let text = config(
        &listener_tls(
            &pki.server_cert,
            &pki.server_key,
            &format!(
                "trusted_ca = {:?}\nrequire_client_certificate = true\n",
                pki.ca.display().to_string()
            ),
        ),
        &format!(
            "[clusters.tls]\ntrusted_ca = {:?}\nsni = \"localhost\"\ncertificate_chain = {:?}\nprivate_key = {:?}\n",
            pki.ca.display().to_string(),
            pki.client_cert.display().to_string(),
            pki.client_key.display().to_string()
        ),
    );
    let c = parse(&text, "t.toml").unwrap();
    let l = c.listeners[0].tls.as_ref().unwrap();
    assert!(l.require_client_certificate);
    assert_eq!(l.trusted_ca.as_deref(), Some(pki.ca.as_path()));
    let u = c.clusters[0].tls.as_ref().unwrap();
    assert_eq!(u.sni.as_deref(), Some("localhost"));
    assert!(!u.insecure_skip_verify);
    // The dump names the files, never their contents.
    let dump = serde_json::to_string(&c).unwrap();
    assert!(dump.contains("server.key"), "{dump}");
    assert!(!dump.contains("PRIVATE KEY"), "{dump}");
}

#[test]
fn a_certificate_rotated_in_place_makes_a_different_snapshot() {
    let pki = Pki::new();
    let text = config(&listener_tls(&pki.server_cert, &pki.server_key, ""), "");
    let a = parse(&text, "t.toml").unwrap();
    assert_eq!(a, parse(&text, "t.toml").unwrap());
    let other = Pki::new();
    std::fs::copy(&other.server_cert, &pki.server_cert).unwrap();
    std::fs::copy(&other.server_key, &pki.server_key).unwrap();
    let b = parse(&text, "t.toml").unwrap();
    assert_ne!(a, b, "same text, new certificate: a reload must apply it");
}

#[test]
fn bad_files_are_config_errors_naming_the_file_and_key() {
    let pki = Pki::new();
    let missing = pki.dir.path().join("nope.pem");
    let text = config(&listener_tls(&missing, &pki.server_key, ""), "");
    assert_err(
        &text,
        8,
        "listeners[0].tls.certificate_chain",
        &format!("cannot read {}", missing.display()),
    );

    let garbage = pki.dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let text = config(&listener_tls(&garbage, &pki.server_key, ""), "");
    assert_err(
        &text,
        8,
        "listeners[0].tls.certificate_chain",
        &format!("{}: no CERTIFICATE block", garbage.display()),
    );

    let text = config(&listener_tls(&pki.server_cert, &garbage, ""), "");
    assert_err(
        &text,
        9,
        "listeners[0].tls.private_key",
        &format!("{}: no PEM private key", garbage.display()),
    );

    // The client's key with the server's certificate.
    let text = config(&listener_tls(&pki.server_cert, &pki.client_key, ""), "");
    assert_err(
        &text,
        9,
        "listeners[0].tls.private_key",
        &format!(
            "{} is not the key of {}",
            pki.client_key.display(),
            pki.server_cert.display()
        ),
    );

    let text = config(
        &listener_tls(
            &pki.server_cert,
            &pki.server_key,
            "require_client_certificate = true\n",
        ),
        "",
    );
    assert_err(
        &text,
        10,
        "listeners[0].tls.require_client_certificate",
        "needs trusted_ca",
    );

    let text = config(
        "",
        &format!(
            "[clusters.tls]\ntrusted_ca = {:?}\ncertificate_chain = {:?}\n",
            pki.ca.display().to_string(),
            pki.client_cert.display().to_string()
        ),
    );
    assert_err(
        &text,
        11,
        "clusters[0].tls.private_key",
        "needed with certificate_chain",
    );

    let text = config("", "[clusters.tls]\nsni = \"not a name\"\n");
    assert_err(
        &text,
        12,
        "clusters[0].tls.sni",
        "not a DNS name or IP address",
    );
}

#[test]
fn sni_names_are_dns_names_with_at_most_a_leading_wildcard() {
    let pki = Pki::new();
    let sni = |name: &str| {
        format!(
            "[[listeners.tls.sni]]\nserver_names = [{name:?}]\ncertificate_chain = {:?}\nprivate_key = {:?}\n",
            pki.server_cert.display().to_string(),
            pki.server_key.display().to_string()
        )
    };
    let ok = config(
        &listener_tls(&pki.server_cert, &pki.server_key, &sni("*.Example.com")),
        "",
    );
    let c = parse(&ok, "t.toml").unwrap();
    assert_eq!(
        c.listeners[0].tls.as_ref().unwrap().sni[0].server_names,
        ["*.example.com"]
    );
    let bad = config(
        &listener_tls(&pki.server_cert, &pki.server_key, &sni("a.*.example.com")),
        "",
    );
    assert_err(
        &bad,
        11,
        "listeners[0].tls.sni[0].server_names",
        "one leading wildcard label only",
    );
}

#[test]
fn a_host_is_verified_as_sni_else_its_written_name_else_its_ip() {
    let pki = Pki::new();
    let ca = pki.ca.display().to_string();
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
    let with = |sni: Option<&str>| {
        tls::upstream(
            Some(ca.clone().into()),
            sni.map(str::to_owned),
            None,
            None,
            false,
        )
        .unwrap()
    };
    let name = |t: &UpstreamTls, text: Option<&str>| format!("{:?}", t.server_name(text, ip));
    let plain = with(None);
    assert!(name(&plain, Some("redis.internal:6379")).contains("redis.internal"));
    assert!(
        name(&plain, Some("[::1]:6379")).contains("::1")
            || name(&plain, Some("[::1]:6379")).contains("IpAddress")
    );
    assert!(
        name(&plain, None).contains("IpAddress"),
        "{}",
        name(&plain, None)
    );
    let named = with(Some("cache.example"));
    assert!(name(&named, Some("10.0.0.7:6379")).contains("cache.example"));
    assert!(name(&named, None).contains("cache.example"));
}

/// Files that are not PEM files of a sane size are refused before they are read whole: a
/// device (which never ends), a FIFO (which would block a reload), a file past
/// `tls::MAX_PEM_BYTES`; an encrypted key is named as such.
#[test]
fn devices_fifos_huge_files_and_encrypted_keys_are_refused() {
    let pki = Pki::new();
    let text = config(
        &listener_tls(Path::new("/dev/zero"), &pki.server_key, ""),
        "",
    );
    assert_err(
        &text,
        8,
        "listeners[0].tls.certificate_chain",
        "/dev/zero: not a regular file",
    );

    let fifo = pki.dir.path().join("fifo.pem");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let text = config(&listener_tls(&pki.server_cert, &fifo, ""), "");
    assert_err(
        &text,
        9,
        "listeners[0].tls.private_key",
        &format!("{}: not a regular file", fifo.display()),
    );

    let huge = pki.dir.path().join("huge.pem");
    let f = std::fs::File::create(&huge).unwrap();
    f.set_len(tls::MAX_PEM_BYTES + 1).unwrap();
    let text = config(
        "",
        &format!(
            "[clusters.tls]\ntrusted_ca = {:?}\n",
            huge.display().to_string()
        ),
    );
    assert_err(
        &text,
        12,
        "clusters[0].tls.trusted_ca",
        "more than a PEM file holds",
    );

    let encrypted = pki.dir.path().join("encrypted.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let text = config(&listener_tls(&pki.server_cert, &encrypted, ""), "");
    assert_err(
        &text,
        9,
        "listeners[0].tls.private_key",
        "the key is encrypted",
    );
}

/// An SNI entry with no names, or a name (in any case) already in another entry, would never
/// be chosen: config errors naming the entry.
#[test]
fn sni_entries_without_names_or_with_a_taken_name_are_refused() {
    let pki = Pki::new();
    let entry = |names: &str| {
        format!(
            "[[listeners.tls.sni]]\nserver_names = [{names}]\ncertificate_chain = {:?}\nprivate_key = {:?}\n",
            pki.server_cert.display().to_string(),
            pki.server_key.display().to_string()
        )
    };
    let empty = config(
        &listener_tls(&pki.server_cert, &pki.server_key, &entry("")),
        "",
    );
    assert_err(
        &empty,
        10,
        "listeners[0].tls.sni[0].server_names",
        "empty: the entry would serve no client",
    );
    let twice = config(
        &listener_tls(
            &pki.server_cert,
            &pki.server_key,
            &format!("{}{}", entry("\"a.b\""), entry("\"x.y\", \"A.B\"")),
        ),
        "",
    );
    assert_err(
        &twice,
        15,
        "listeners[0].tls.sni[1].server_names",
        "a.b is already served by sni[0]",
    );
}

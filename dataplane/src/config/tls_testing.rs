//! Test certificates, made with rcgen into a temporary directory: a CA, a server certificate
//! for `localhost` and 127.0.0.1 signed by it, a client certificate signed by it, and one
//! self-signed certificate from nowhere.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// The files of one test PKI (PEM).
pub(crate) struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// Self-signed, for `localhost`: verifies against nothing the PKI trusts.
    pub stranger_cert: PathBuf,
    pub stranger_key: PathBuf,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n);
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf = |names: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
        let (client, client_key) = leaf(vec!["client".into()]);
        let stranger_key = KeyPair::generate().unwrap();
        let stranger = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&stranger_key)
            .unwrap();
        let files = [
            ("ca.pem", ca.pem()),
            ("server.pem", server),
            ("server.key", server_key),
            ("client.pem", client),
            ("client.key", client_key),
            ("stranger.pem", stranger.pem()),
            ("stranger.key", stranger_key.serialize_pem()),
        ];
        for (name, text) in files {
            std::fs::write(path(name), text).unwrap();
        }
        Pki {
            ca: path("ca.pem"),
            server_cert: path("server.pem"),
            server_key: path("server.key"),
            client_cert: path("client.pem"),
            client_key: path("client.key"),
            stranger_cert: path("stranger.pem"),
            stranger_key: path("stranger.key"),
            dir,
        }
    }
}

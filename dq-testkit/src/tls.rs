//! A server that also listens for TLS, with a test certificate authority and the server and
//! client certificates it signed, made by the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::net::free_port;
use crate::RedisServer;

impl RedisServer {
    /// Starts a server that also listens for TLS on a second port, with a certificate
    /// authority, a server certificate (for 127.0.0.1 and localhost) and a client certificate
    /// made for it by the `openssl` command in its directory. With `require_client_cert`,
    /// TLS clients must present a certificate signed by that authority
    /// (`tls-auth-clients yes`). The plain port stays open for the test's own checks.
    pub fn start_tls(require_client_cert: bool) -> RedisServer {
        let mut server = RedisServer::start();
        let tls_port = free_port().expect("a free port for TLS");
        make_certificates(server.dir());
        let file = |name: &str| server.dir.join(name).to_string_lossy().into_owned();
        let args = [
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            file("server.crt"),
            "--tls-key-file".to_owned(),
            file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            if require_client_cert { "yes" } else { "no" }.to_owned(),
        ];
        server.args.extend(args);
        server.tls_port = Some(tls_port);
        server.restart();
        server
    }

    /// `rediss://127.0.0.1:<tls port>/` of a server started with [`RedisServer::start_tls`].
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .expect("the server was started with start_tls");
        format!("rediss://127.0.0.1:{port}/")
    }

    /// The PEM file of the test certificate authority (`ca.crt`), and next to it
    /// `client.crt` and `client.key` signed by it.
    pub fn tls_file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Runs `openssl` with `args` in `dir`; fails the test when it fails or is not installed.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => panic!(
                "openssl is not installed: install it (apt-get install -y openssl) to run the TLS tests; scripts/test does this for you"
            ),
            _ => panic!("running openssl: {e}"),
        });
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA, a server certificate for 127.0.0.1/localhost and a client certificate, by the
/// `openssl` command (Debian's `openssl` package).
fn make_certificates(dir: &Path) {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("write server.ext");
    // Extensions make an X.509 v3 certificate; rustls refuses the v1 that `x509 -req` makes
    // without them ("UnsupportedCertVersion").
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")
        .expect("write client.ext");
    let days = ["-days", "2"];
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=dq test CA",
            days[0],
            days[1],
        ],
    );
    for (name, subject, ext) in [
        ("server", "/CN=127.0.0.1", "server.ext"),
        ("client", "/CN=dq test client", "client.ext"),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            dir,
            &[
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
                subject,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                days[0],
                days[1],
                "-extfile",
                ext,
            ],
        );
    }
}

//! Opening a redis-rs client for a URL: TLS with the configured certificate files, and URLs
//! with their password hidden in errors and logs.

use std::time::Duration;

use dq_core::Config;
use dq_core::{Error, Result};

/// The URL with its password replaced by `***`, for errors and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// A redis-rs client for `url`: `rediss://` with the CA and client certificate of `config`.
pub(crate) fn open_client(url: &str, config: &Config) -> Result<redis::Client> {
    let bad = |reason: String| Error::Config {
        key: "redis_url",
        value: redact_url(url),
        reason,
    };
    let tls = url.starts_with("rediss://");
    if !tls && (config.tls_ca_file.is_some() || config.tls_cert_file.is_some()) {
        return Err(bad(
            "TLS files are set but the URL is not rediss://: use rediss:// to connect with TLS"
                .into(),
        ));
    }
    if tls {
        use_ring_unless_chosen();
    }
    let client = if !tls || (config.tls_ca_file.is_none() && config.tls_cert_file.is_none()) {
        redis::Client::open(url).map_err(|e| {
            bad(if tls && !TLS {
                NO_TLS.into()
            } else {
                e.to_string()
            })
        })?
    } else {
        tls_client(url, config).map_err(bad)?
    };
    with_tcp_settings(client)
}

/// Whether this build can connect over TLS, with OpenSSL (`tls`) or rustls (`rustls`; rustls
/// wins when both are on, as redis-rs decides).
const TLS: bool = cfg!(any(feature = "tls", feature = "rustls"));

const NO_TLS: &str = "this build of dq has no TLS support: enable the `rustls` feature of the dq crate (or `tls`, for the system's OpenSSL)";

/// rustls needs a crypto provider for the process; dq brings `ring`, installed here unless the
/// application chose one first (it may have enabled another, such as aws-lc-rs).
fn use_ring_unless_chosen() {
    #[cfg(feature = "rustls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: a provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(any(feature = "tls", feature = "rustls"))]
fn tls_client(url: &str, config: &Config) -> std::result::Result<redis::Client, String> {
    let certs = tls_certificates(config)?.unwrap_or(redis::TlsCertificates {
        client_tls: None,
        root_cert: None,
    });
    redis::Client::build_with_tls(url, certs).map_err(|e| e.to_string())
}

/// The CA and client certificate files of `config`, read; `None` when none is set.
#[cfg(any(feature = "tls", feature = "rustls"))]
fn tls_certificates(
    config: &Config,
) -> std::result::Result<Option<redis::TlsCertificates>, String> {
    if config.tls_ca_file.is_none() && config.tls_cert_file.is_none() {
        return Ok(None);
    }
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
    };
    let root_cert = match &config.tls_ca_file {
        Some(path) => Some(read(path, "CA certificate (DQ_TLS_CA_FILE)")?),
        None => None,
    };
    let client_tls = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert, "client certificate (DQ_TLS_CERT_FILE)")?,
            client_key: read(key, "client key (DQ_TLS_KEY_FILE)")?,
        }),
        _ => None,
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

#[cfg(not(any(feature = "tls", feature = "rustls")))]
fn tls_client(_url: &str, _config: &Config) -> std::result::Result<redis::Client, String> {
    Err(NO_TLS.into())
}

/// The socket options of every connection dq opens: no Nagle delay (a wake-up or a fetch is one
/// small packet that must leave at once), and a peer that vanished without closing the
/// connection (power loss, a partition, a firewall dropping the flow) is noticed within about
/// 20 s by the kernel, whatever the command waits for: keepalive probes every 5 s after 10 s
/// of silence, and unacknowledged data gives up after 20 s (`TCP_USER_TIMEOUT`).
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(2);
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let settings = settings.set_user_timeout(Duration::from_secs(20));
    settings
}

/// The client with dq's socket options ([`tcp_settings`]).
fn with_tcp_settings(client: redis::Client) -> Result<redis::Client> {
    redis::Client::open(
        client
            .get_connection_info()
            .clone()
            .set_tcp_settings(tcp_settings()),
    )
    .map_err(crate::error::redis("configure the connection"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_password_is_never_shown() {
        assert_eq!(
            redact_url("redis://dq:s3cret@10.0.0.1:6379/0"),
            "redis://dq:***@10.0.0.1:6379/0"
        );
        assert_eq!(redact_url("rediss://:s3cret@host/"), "rediss://:***@host/");
        assert_eq!(redact_url("redis://host:6379/"), "redis://host:6379/");
    }

    #[test]
    fn tls_files_need_a_rediss_url() {
        let config = Config::builder()
            .redis_url("redis://:pw@127.0.0.1:1/")
            .tls_ca_file("/ca.crt")
            .build()
            .unwrap();
        let err = open_client("redis://:pw@127.0.0.1:1/", &config)
            .unwrap_err()
            .to_string();
        assert!(err.contains("rediss://") && !err.contains("pw@"), "{err}");
    }
}

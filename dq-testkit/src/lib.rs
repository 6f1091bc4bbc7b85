//! Test support for dq: a real `redis-server` on a free loopback port, in a temp directory of
//! its own, killed (by its pid, and only it) when the handle is dropped.
//!
//! ```no_run
//! let redis = dq_testkit::RedisServer::start();
//! println!("{}", redis.url());
//! ```
//!
//! When `redis-server` is not installed the test fails with the command that installs it;
//! it never skips silently.

pub mod process;
pub mod stats;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// What to tell someone whose machine has no `redis-server`.
pub const INSTALL_HINT: &str =
    "redis-server is not installed: install redis-server (apt-get install -y redis-server); scripts/test does this for you";

/// A `redis-server` process owned by a test.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    tls_port: Option<u16>,
}

impl RedisServer {
    /// Starts a server with persistence off (`--save '' --appendonly no`).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// Starts a server with extra arguments (`--appendonly yes`, `--maxmemory 1mb`, ...).
    pub fn start_with(args: &[&str]) -> RedisServer {
        let mut last_error = String::new();
        for _ in 0..5 {
            match RedisServer::try_start(args) {
                Ok(server) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    fn try_start(args: &[&str]) -> Result<RedisServer, String> {
        RedisServer::try_start_binary("redis-server", args)
    }

    fn try_start_binary(binary: &str, args: &[&str]) -> Result<RedisServer, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!(
            "dq-redis-{}-{}-{port}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let child = spawn(binary, port, &dir, &args)?;
        let mut server = RedisServer {
            child,
            port,
            dir,
            args,
            tls_port: None,
        };
        server.wait_ready()?;
        Ok(server)
    }

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

    /// Kills the server with SIGKILL (no shutdown, no final save).
    pub fn kill(&mut self) {
        process::kill(&mut self.child);
    }

    /// Kills the server if it runs, then starts it again on the same port and directory with
    /// the same arguments (an AOF or RDB file there is loaded).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match spawn("redis-server", self.port, &self.dir, &self.args) {
                Ok(child) => {
                    self.child = child;
                    match self.wait_ready() {
                        Ok(()) => return,
                        Err(e) if Instant::now() > deadline => {
                            panic!("restarting redis-server: {e}")
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
                Err(e) => panic!("restarting redis-server: {e}"),
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                return Err(format!("redis-server exited with {status}: {log}"));
            }
            if ping(self.port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "redis-server on port {} did not answer PING in 10 s",
            self.port
        ))
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its working directory (AOF and RDB files, `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends one command in the inline protocol and returns the raw reply (for tests that
    /// want to plant data or read INFO without a client library).
    pub fn command(&self, args: &[&str]) -> String {
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.port)).expect("connect to test redis");
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream
            .write_all(req.as_bytes())
            .expect("write to test redis");
        // A slow command (FLUSHALL of a million keys) may take seconds to start answering;
        // once it has, a pause means the reply is complete.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("set timeout");
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    stream
                        .set_read_timeout(Some(Duration::from_millis(300)))
                        .expect("set timeout");
                }
                Err(_) if !out.is_empty() => break,
                Err(e) => panic!("reading from test redis: {e}"),
            }
            if out.ends_with(b"\r\n") && complete(&out) {
                break;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// A local Redis Cluster owned by a test: `masters` masters with `replicas` replicas each, on
/// free loopback ports, joined with `redis-cli --cluster create`. Every node is killed (by its
/// pid) when the handle is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node says `cluster_state:ok`.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let bus = free_port().expect("a free port for the cluster bus");
            let bus = bus.to_string();
            nodes.push(RedisServer::start_with(&[
                "--save",
                "",
                "--appendonly",
                "no",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                &bus,
                // Replicas sync at once instead of after the default 5 s (a replica that has
                // not synced yet cannot take over from its master).
                "--repl-diskless-sync-delay",
                "0",
            ]));
        }
        if masters < 3 {
            // redis-cli --cluster create wants three masters: join one or two by hand.
            assert_eq!(
                replicas, 0,
                "a cluster of fewer than 3 masters has no replicas here"
            );
            let per = 16384 / masters;
            for (i, node) in nodes.iter().enumerate() {
                let first = (i * per).to_string();
                let last = if i + 1 == masters {
                    16383
                } else {
                    (i + 1) * per - 1
                }
                .to_string();
                let reply = node.command(&["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
                assert!(reply.starts_with("+OK"), "CLUSTER ADDSLOTSRANGE: {reply}");
                if i > 0 {
                    let port = nodes[0].port().to_string();
                    node.command(&["CLUSTER", "MEET", "127.0.0.1", &port]);
                }
            }
            let cluster = RedisCluster { nodes };
            cluster.wait_ok(Duration::from_secs(30));
            return cluster;
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT} (redis-cli comes with it)"),
                _ => panic!("running redis-cli --cluster create: {e}"),
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(Duration::from_secs(30));
        cluster
    }

    /// Waits until every node reports `cluster_state:ok` and knows all its peers, and every
    /// replica has synced with its master.
    pub fn wait_ok(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self.nodes.iter().all(|n| {
                let info = n.command(&["CLUSTER", "INFO"]);
                let replication = n.command(&["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis://127.0.0.1:<port>/` of every node, to use as seeds.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, masters and replicas alike.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The running nodes that are masters now (`INFO replication`).
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| ping(n.port()))
            .filter(|n| n.command(&["INFO", "replication"]).contains("role:master"))
            .collect()
    }

    /// The port of the master that serves `key` now (`CLUSTER KEYSLOT` and `CLUSTER NODES`
    /// of a running node).
    pub fn master_of(&self, key: &str) -> u16 {
        let any = self
            .nodes
            .iter()
            .find(|n| ping(n.port()))
            .expect("a running node");
        let reply = any.command(&["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = reply
            .trim()
            .trim_start_matches(':')
            .parse()
            .expect("CLUSTER KEYSLOT answers a number");
        let nodes = any.command(&["CLUSTER", "NODES"]);
        nodes
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let serves = fields.iter().skip(8).any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
                });
                let port = fields.get(1)?.split('@').next()?.rsplit(':').next()?;
                serves.then(|| port.parse().ok()).flatten()
            })
            .expect("a master serves every slot")
    }

    /// The port of a replica of the master on `master_port`.
    pub fn replica_of(&self, master_port: u16) -> u16 {
        let any = self
            .nodes
            .iter()
            .find(|n| ping(n.port()))
            .expect("a running node");
        let nodes = any.command(&["CLUSTER", "NODES"]);
        let port_of = |line: &str| -> Option<u16> {
            line.split_whitespace()
                .nth(1)?
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        };
        let master_id = nodes
            .lines()
            .find(|l| port_of(l) == Some(master_port))
            .and_then(|l| l.split_whitespace().next())
            .expect("the master is known")
            .to_owned();
        nodes
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some(master_id.as_str()))
            .find_map(port_of)
            .expect("the master has a replica")
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// The node listening on `port`, to kill or restart it.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }
}

/// A best-effort check that a RESP reply is complete (simple replies and one bulk string).
fn complete(reply: &[u8]) -> bool {
    match reply.first() {
        Some(b'$') => {
            let text = String::from_utf8_lossy(reply);
            let Some((len, rest)) = text[1..].split_once("\r\n") else {
                return false;
            };
            match len.parse::<i64>() {
                Ok(n) if n < 0 => true,
                Ok(n) => rest.len() >= n as usize + 2,
                Err(_) => true,
            }
        }
        Some(b'*') => false,
        _ => true,
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Our own child, by its pid: never a pattern match on process names.
        process::kill(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(binary: &str, port: u16, dir: &Path, args: &[String]) -> Result<Child, String> {
    Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(["--logfile", "redis.log", "--daemonize", "no"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            _ => format!("spawning redis-server: {e}"),
        })
}

/// A test CA, a server certificate for 127.0.0.1/localhost and a client certificate, by the
/// `openssl` command (Debian's `openssl` package).
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
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
    };
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
    run(&[
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
    ]);
    for (name, subject, ext) in [
        ("server", "/CN=127.0.0.1", Some("server.ext")),
        ("client", "/CN=dq test client", Some("client.ext")),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        run(&[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ]);
        let mut sign = vec![
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
        ];
        if let Some(ext) = ext {
            sign.extend(["-extfile", ext]);
        }
        run(&sign);
    }
}

/// A loopback port that nothing listens on now (the OS just handed it out and it was closed
/// again): for a server of the test's own, or for a connection that must be refused.
///
/// # Panics
/// When the OS has no free port to give.
pub fn unused_port() -> u16 {
    free_port().unwrap_or_else(|e| panic!("{e}"))
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_redis_server_fails_with_the_install_command() {
        let panic = std::panic::catch_unwind(|| {
            let _ = RedisServer::try_start_binary("redis-server-that-is-not-installed", &[]);
        })
        .expect_err("a missing binary must fail the test");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("apt-get install -y redis-server"),
            "{message}"
        );
    }

    #[test]
    fn a_cluster_of_three_masters_and_three_replicas_comes_up() {
        let started = Instant::now();
        let cluster = RedisCluster::start(3, 1);
        eprintln!("cluster up in {:?}", started.elapsed());
        assert_eq!(cluster.nodes().len(), 6);
        assert_eq!(cluster.masters().len(), 3);
    }

    #[test]
    fn server_answers_and_its_directory_is_removed_on_drop() {
        let server = RedisServer::start();
        assert_eq!(server.command(&["PING"]).trim(), "+PONG");
        let dir = server.dir().to_owned();
        drop(server);
        assert!(!dir.exists());
    }
}

//! One `redis-server` owned by a test: started on a free port in a directory of its own,
//! restarted or killed at the test's word, killed and its directory removed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::net::{free_port, ping};
use crate::{process, INSTALL_HINT};

/// A `redis-server` process owned by a test.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    pub(crate) dir: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) tls_port: Option<u16>,
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

    pub(crate) fn try_start(args: &[&str]) -> Result<RedisServer, String> {
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
    fn server_answers_and_its_directory_is_removed_on_drop() {
        let server = RedisServer::start();
        assert_eq!(server.command(&["PING"]).trim(), "+PONG");
        let dir = server.dir().to_owned();
        drop(server);
        assert!(!dir.exists());
    }
}

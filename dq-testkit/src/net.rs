//! Loopback ports: a free one for a server of our own, and whether a Redis answers on one.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A loopback port that nothing listens on now (the OS just handed it out and it was closed
/// again): for a server of the test's own, or for a connection that must be refused.
///
/// # Panics
/// When the OS has no free port to give.
pub fn unused_port() -> u16 {
    free_port().unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Whether a Redis on `port` answers PING (within 200 ms).
pub(crate) fn ping(port: u16) -> bool {
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

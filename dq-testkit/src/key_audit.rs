//! Which keys a server's scripts touch without declaring them: the rule a Redis Cluster needs
//! for a script to be safe while its slot moves (Redis checks the keys a call declares before
//! it runs it, and reads any other where the script runs, where it may not have moved yet).
//!
//! A [`KeyAudit`] reads the server's `MONITOR` feed, where each command a script calls follows
//! the `EVALSHA` that ran it (marked `lua`), and compares the keys of each such command with
//! the keys the call declared.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::RedisServer;

/// The text that ends an audit's feed (an `ECHO` sent when it finishes).
const END: &str = "dq-key-audit-end";

/// A `MONITOR` of one server, from [`KeyAudit::start`] to [`KeyAudit::finish`].
#[derive(Debug)]
pub struct KeyAudit {
    port: u16,
    stream: TcpStream,
    reader: JoinHandle<Vec<String>>,
}

impl KeyAudit {
    /// Starts monitoring `server`: every command it runs from now is read.
    pub fn start(server: &RedisServer) -> KeyAudit {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port()))
            .unwrap_or_else(|e| panic!("connect to redis on port {}: {e}", server.port()));
        stream
            .write_all(b"MONITOR\r\n")
            .expect("send MONITOR to redis");
        let mut lines = BufReader::new(stream.try_clone().expect("clone the MONITOR connection"));
        let mut first = String::new();
        lines.read_line(&mut first).expect("read MONITOR's reply");
        assert!(first.starts_with("+OK"), "MONITOR refused: {first}");
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            for line in lines.lines() {
                let Ok(line) = line else { break };
                if line.contains(END) {
                    break;
                }
                out.push(line);
            }
            out
        });
        KeyAudit {
            port: server.port(),
            stream,
            reader,
        }
    }

    /// Stops monitoring and returns each key a script touched without declaring it, as
    /// `<script>: <key>` (the script named by `names`, its SHA1 -> name; `?` for others),
    /// sorted, once each.
    pub fn finish(self, names: &HashMap<String, &str>) -> Vec<String> {
        // The end mark goes through the server like any command: every line before it has
        // been read when the reader meets it.
        let mut marker = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        let echo = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{END}\r\n", END.len());
        marker
            .write_all(echo.as_bytes())
            .expect("send the end mark");
        let _ = marker.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reply = String::new();
        let _ = BufReader::new(&marker).read_line(&mut reply);
        let lines = self.reader.join().expect("the MONITOR reader");
        let _ = self.stream.shutdown(Shutdown::Both);
        undeclared(&lines, names)
    }
}

/// The undeclared keys of `lines` of a `MONITOR` feed (see [`KeyAudit::finish`]).
fn undeclared(lines: &[String], names: &HashMap<String, &str>) -> Vec<String> {
    let mut found = BTreeSet::new();
    let mut call: Option<(&str, BTreeSet<String>)> = None;
    for line in lines {
        let Some((source, args)) = parse(line) else {
            continue;
        };
        if source != "lua" {
            call = None;
            let Some(command) = args.first() else {
                continue;
            };
            if command.eq_ignore_ascii_case("evalsha") || command.eq_ignore_ascii_case("eval") {
                let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                let declared = args.iter().skip(3).take(n).cloned().collect();
                let sha = args
                    .get(1)
                    .map(|s| s.to_ascii_lowercase())
                    .unwrap_or_default();
                call = Some((names.get(&sha).copied().unwrap_or("?"), declared));
            }
            continue;
        }
        let Some((script, declared)) = &call else {
            continue;
        };
        for key in keys_of(&args) {
            if !declared.contains(key) {
                found.insert(format!("{script}: {key}"));
            }
        }
    }
    found.into_iter().collect()
}

/// The keys a command names, for the commands dq's scripts call (every argument of EXISTS and
/// DEL, none of TIME and PUBLISH, the first argument of the others).
fn keys_of(args: &[String]) -> &[String] {
    let Some(command) = args.first() else {
        return &[];
    };
    match command.to_ascii_uppercase().as_str() {
        "EXISTS" | "DEL" | "UNLINK" | "TOUCH" | "MGET" => &args[1..],
        "TIME" | "PUBLISH" | "PING" | "ECHO" => &[],
        _ => args.get(1..2).unwrap_or_default(),
    }
}

/// A `MONITOR` line, `+<time> [<db> <source>] "<arg>" ...`: its source (`lua` for a command a
/// script called, the client's address for the others) and its arguments.
fn parse(line: &str) -> Option<(&str, Vec<String>)> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let source = line[open + 1..close].split(' ').nth(1)?;
    let mut args = Vec::new();
    let mut chars = line[close + 1..].chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut bytes = Vec::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => bytes.push(b'\n'),
                    Some('r') => bytes.push(b'\r'),
                    Some('t') => bytes.push(b'\t'),
                    Some('a') => bytes.push(7),
                    Some('b') => bytes.push(8),
                    Some('x') => {
                        let hex: String = [chars.next()?, chars.next()?].iter().collect();
                        bytes.push(u8::from_str_radix(&hex, 16).ok()?);
                    }
                    Some(other) => {
                        let mut buf = [0; 4];
                        bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                    }
                    None => return None,
                },
                other => {
                    let mut buf = [0; 4];
                    bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        args.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    Some((source, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_a_script_touches_without_declaring_it_is_found_once() {
        let lines = [
            r#"+1.0 [0 127.0.0.1:5000] "EVALSHA" "ABC" "2" "k1" "k\"2" "arg""#,
            r#"+1.1 [0 lua] "HGET" "k1" "f""#,
            r#"+1.2 [0 lua] "EXISTS" "k\"2" "other""#,
            r#"+1.3 [0 lua] "PUBLISH" "chan" "m""#,
            r#"+1.4 [0 lua] "RPUSH" "other" "x""#,
            r#"+1.5 [0 127.0.0.1:5000] "GET" "plain""#,
            r#"+1.6 [0 lua] "GET" "after""#,
        ]
        .map(String::from);
        let names = HashMap::from([("abc".to_owned(), "push")]);
        assert_eq!(undeclared(&lines, &names), ["push: other"]);
    }

    #[test]
    fn escaped_bytes_of_an_argument_are_read() {
        let (source, args) = parse(r#"+1.0 [0 lua] "SET" "a\x41\\b" "c d""#).unwrap();
        assert_eq!(source, "lua");
        assert_eq!(args, ["SET", "aA\\b", "c d"]);
    }
}

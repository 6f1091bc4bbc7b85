//! Worker processes for tests, dq-bench and dq-chaos: this same program started again in another
//! role, and stopped the way an orchestrator stops it. Each is our own child, signalled by its
//! pid and nothing else.

use std::io;
use std::process::{Child, Command};

/// This program again (`current_exe`), with `args` saying which role to play: dq-bench and
/// dq-chaos have a hidden `worker` subcommand, a test binary runs one test by name.
///
/// ```no_run
/// let worker = dq_testkit::process::this_program(["worker", "--url", "redis://127.0.0.1:7000/"])
///     .unwrap()
///     .spawn()
///     .unwrap();
/// dq_testkit::process::terminate(worker.id()).unwrap();
/// ```
pub fn this_program<I, S>(args: I) -> io::Result<Command>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(args);
    Ok(cmd)
}

/// This test binary again, running only the test `name` (which reads the role from the
/// environment `cmd` is given).
pub fn this_test(name: &str) -> io::Result<Command> {
    this_program([name, "--exact", "--nocapture", "--test-threads=1"])
}

/// SIGTERM to the process `pid` (a child of ours): what `systemctl stop` or Kubernetes sends.
/// Through the `kill` command, as std has no signals; an error says why it was not sent.
pub fn terminate(pid: u32) -> io::Result<()> {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("kill -TERM {pid}: {status}")))
    }
}

/// SIGKILL of a child and the wait for its exit, so that no zombie is left.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

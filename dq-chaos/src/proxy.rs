//! A TCP proxy on loopback between the workers and Redis that can black-hole its connections:
//! it stops forwarding in both directions and keeps the sockets open, sending no FIN and no
//! RST, as a peer that lost power or a partition would look to the workers. Connections that
//! were black-holed stay that way for good (the peer they talked to is gone); connections made
//! after `restore` are forwarded again.
//!
//! On loopback the kernel still acknowledges what the workers send, so TCP keepalive and
//! `TCP_USER_TIMEOUT` cannot notice the fault here: only dq's own time limits and pings can,
//! which is what the `blackhole` scenario shows.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The proxy; dropping it closes every connection it holds.
#[derive(Debug)]
pub(crate) struct Blackhole {
    addr: SocketAddr,
    state: Arc<State>,
    _tasks: JoinSet<()>,
}

#[derive(Debug, Default)]
struct State {
    /// New connections are black-holed from the start while this is set.
    dark: AtomicBool,
    /// The flags of the connections made so far.
    connections: Mutex<Vec<Weak<AtomicBool>>>,
}

impl Blackhole {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> anyhow::Result<Blackhole> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let mut tasks = JoinSet::new();
        tasks.spawn(accept(listener, upstream, state.clone()));
        Ok(Blackhole {
            addr,
            state,
            _tasks: tasks,
        })
    }

    /// `redis://127.0.0.1:<port>/` of the proxy.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Every connection stops forwarding, for good; new ones do not forward until `restore`.
    pub(crate) fn cut(&self) -> usize {
        self.state.dark.store(true, Ordering::SeqCst);
        let connections = self.state.connections.lock().expect("proxy lock");
        let mut cut = 0;
        for flag in connections.iter().filter_map(Weak::upgrade) {
            flag.store(true, Ordering::SeqCst);
            cut += 1;
        }
        cut
    }

    /// Connections made from now on are forwarded (the ones cut stay silent).
    pub(crate) fn restore(&self) {
        self.state.dark.store(false, Ordering::SeqCst);
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, state: Arc<State>) {
    // Dropped (and so aborted) with the accept task: every connection ends with the proxy.
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let dead = Arc::new(AtomicBool::new(state.dark.load(Ordering::SeqCst)));
        {
            let mut all = state.connections.lock().expect("proxy lock");
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&dead));
        }
        connections.spawn(forward(client, upstream, dead));
        while connections.try_join_next().is_some() {}
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, dead: Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, dead.clone()),
        pump(server_read, client_write, dead),
    );
}

/// Copies bytes one way until either side closes; once `dead`, holds both sockets open and
/// forwards nothing more, forever (until the proxy is dropped).
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, dead: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if dead.load(Ordering::SeqCst) {
            let _hold = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(n) if n > 0 => n,
            // Closed or broken; once dead, the other side must not see it either.
            _ if dead.load(Ordering::SeqCst) => continue,
            _ => return,
        };
        if dead.load(Ordering::SeqCst) {
            continue; // swallowed; the loop then holds the sockets
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

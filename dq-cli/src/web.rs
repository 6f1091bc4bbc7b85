//! `dq web`: the dashboard on its own, until Ctrl-C or SIGTERM.

use std::io::Write as _;

use dq::Client;
use tokio::signal::unix::{signal, SignalKind};

use crate::args::WebArgs;
use crate::Exit;

/// Serves the dashboard, printing the address it listens on first.
pub(crate) async fn serve(client: Client, args: WebArgs) -> Result<(), Exit> {
    let WebArgs {
        listen,
        read_only,
        token,
        allowed_hosts,
    } = args;
    let mut options = dq::web::Options::new()
        .read_only(read_only)
        .allowed_hosts(allowed_hosts);
    let protected = token.as_ref().is_some_and(|t| !t.is_empty());
    if let Some(token) = token {
        options = options.token(token);
    }
    let app = dq::web::router(client, options);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Exit(1, format!("cannot listen on {listen}: {e}")))?;
    let at = listener.local_addr()?;
    // Scripts and tests read this line for the address (with port 0, the port chosen).
    println!("dq web: serving the dashboard on http://{at}/");
    if !protected && !at.ip().is_loopback() {
        eprintln!(
            "dq web: warning: no token set (DQ_WEB_TOKEN) and listening beyond loopback: anyone who reaches {at} can act on the queues"
        );
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    // stdout may be gone by now (a supervisor that read the address and closed the pipe).
    let _ = writeln!(std::io::stdout(), "dq web: stopped");
    Ok(())
}

/// Ctrl-C or SIGTERM (what a supervisor sends), whichever comes first.
async fn shutdown_signal() {
    let mut term = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            // No SIGTERM handler could be set up: Ctrl-C alone stops it.
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}

//! A web service that pushes jobs from its request handlers and runs the listeners in the same
//! process: placing an order schedules its cancellation; paying in time makes the job find it
//! paid. One Ctrl-C (or SIGTERM) stops both gracefully: the server finishes its requests, the
//! runtime its running jobs.
//!
//! ```sh
//! cargo run --example axum_service                       # in-memory store, 127.0.0.1:3000
//! DQ_REDIS_URL=redis://127.0.0.1:6379/ CANCEL_AFTER=30s cargo run --example axum_service
//!
//! curl -X POST localhost:3000/orders/7          # order 7 placed; cancelled in 30 s unless paid
//! curl -X POST localhost:3000/orders/7/pay
//! curl localhost:3000/orders/7                  # "paid", or "cancelled" once its time is up
//! ```
//!
//! `LISTEN` sets the address (default `127.0.0.1:3000`), `CANCEL_AFTER` the delay (default 10m).
//!
//! On the in-memory store (no `DQ_REDIS_URL`) pending jobs live in this process only: a
//! cancellation not yet due when it stops is gone, as the orders are. With Redis they wait for
//! the next start. (`axum::extract::State` is axum's state; a listener's is `dq::State`.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use tracing::info;

/// The orders, shared by the web handlers and the listener (clones share them). A real
/// service would hold its database pool here.
#[derive(Clone, Debug, Default)]
struct Shop {
    orders: Arc<Mutex<BTreeMap<u64, &'static str>>>,
}

impl Shop {
    fn orders(&self) -> MutexGuard<'_, BTreeMap<u64, &'static str>> {
        self.orders.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// "Cancel order N if it is still unpaid."
#[derive(Debug, Serialize, Deserialize, dq::Message)]
#[message(topic = "order-cancel")]
struct OrderCancel {
    order_id: u64,
}

/// The listener gets the shop registered with `Runtime::builder().state(..)`.
#[dq::listener(timeout = "5s")]
async fn cancel_unpaid_order(msg: OrderCancel, shop: dq::State<Shop>) {
    let mut orders = shop.orders();
    if orders.get(&msg.order_id) == Some(&"unpaid") {
        orders.insert(msg.order_id, "cancelled");
        info!(order = msg.order_id, "order still unpaid: cancelled");
    } else {
        info!(order = msg.order_id, "order paid in time: nothing to do");
    }
}

/// What the web handlers share: the shop and dq's client, to push jobs.
#[derive(Clone)]
struct App {
    shop: Shop,
    jobs: dq::Client,
    cancel_after: Duration,
}

async fn place(
    State(app): State<App>,
    Path(id): Path<u64>,
) -> Result<(StatusCode, String), AppError> {
    {
        let mut orders = app.shop.orders();
        match orders.get(&id).copied() {
            // New, or a client retrying the same POST: placed (again), still unpaid.
            None | Some("unpaid") => orders.insert(id, "unpaid"),
            // Paid or cancelled: placing it again must not reopen it.
            Some(state) => return Ok((StatusCode::CONFLICT, format!("order {id} is {state}\n"))),
        };
    }
    app.jobs
        .push(OrderCancel { order_id: id })
        .id(id.to_string()) // one pending cancellation per order, however often the client retries
        .delay(app.cancel_after)
        .await?;
    info!(order = id, cancel_after = ?app.cancel_after, "order placed");
    Ok((StatusCode::OK, format!("order {id} placed\n")))
}

async fn pay(State(app): State<App>, Path(id): Path<u64>) -> (StatusCode, String) {
    let mut orders = app.shop.orders();
    match orders.get(&id).copied() {
        Some("unpaid") => {
            orders.insert(id, "paid");
            (StatusCode::OK, format!("order {id} paid\n"))
        }
        Some(state) => (StatusCode::CONFLICT, format!("order {id} is {state}\n")),
        None => (StatusCode::NOT_FOUND, format!("no order {id}\n")),
    }
}

async fn show(State(app): State<App>, Path(id): Path<u64>) -> (StatusCode, String) {
    match app.shop.orders().get(&id) {
        Some(state) => (StatusCode::OK, format!("{state}\n")),
        None => (StatusCode::NOT_FOUND, format!("no order {id}\n")),
    }
}

/// A push that failed (Redis unreachable, say): 503, and the order stays placed for a retry.
struct AppError(dq::Error);

impl From<dq::Error> for AppError {
    fn from(e: dq::Error) -> Self {
        AppError(e)
    }
}

impl axum::response::IntoResponse for AppError {
    fn into_response(self) -> axum::response::Response {
        tracing::error!(error = %self.0, "could not schedule the cancellation");
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", self.0)).into_response()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .init();
    let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let cancel_after = match std::env::var("CANCEL_AFTER") {
        Ok(text) => dq::config::parse_duration(&text).map_err(|e| format!("CANCEL_AFTER: {e}"))?,
        Err(_) => Duration::from_secs(600),
    };

    let shop = Shop::default();
    let runtime = dq::Runtime::builder().state(shop.clone()).start().await?;
    let app = App {
        shop,
        jobs: runtime.client().clone(),
        cancel_after,
    };
    let router = Router::new()
        .route("/orders/{id}", post(place).get(show))
        .route("/orders/{id}/pay", post(pay))
        .route("/health", get(|| async { "ok\n" }))
        .with_state(app);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    info!(addr = %listener.local_addr()?, "serving");
    // One signal for both: the runtime catches it and starts its shutdown; the server sees
    // the same request and stops accepting, finishing the requests it has.
    let stop = runtime.shutdown_handle();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.requested().await })
            .await
    });
    let report = runtime.run_until_shutdown_signal().await;
    // The server's requests finish whatever the runtime's shutdown reported.
    let served = server.await;
    let report = report?;
    served??;
    info!(?report, "web server and dq runtime stopped");
    Ok(())
}

//! Opening a store from the configuration, for [`Client::connect`](crate::Client::connect):
//! each store crate registers itself (`dq-redis` registers Redis), so dq-core needs no
//! dependency on any of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Store;
use crate::config::Config;
use crate::error::{Error, Result};

/// The future [`Backend::open`] returns.
pub type Opening<'a> = Pin<Box<dyn Future<Output = Result<Arc<dyn Store>>> + Send + 'a>>;

/// A store that [`open`] can connect to, registered with `inventory::submit!` by the crate
/// that implements it.
#[derive(Debug)]
pub struct Backend {
    /// Its name, for errors (`"redis"`).
    pub name: &'static str,
    /// Whether it serves this configuration (the Redis one: `redis_url` or `redis_cluster`
    /// set).
    pub serves: fn(&Config) -> bool,
    /// Connects.
    pub open: for<'a> fn(&'a Config) -> Opening<'a>,
}

inventory::collect!(Backend);

/// Connects to the store `config` names, through the first registered [`Backend`] that
/// serves it. The `dq` crate links the Redis one.
///
/// A registration is kept only when its crate is linked: through `dq` it always is (the facade
/// names `dq_redis`). A program that depends on `dq-core` and `dq-redis` directly, and never
/// names `dq_redis` in its code, has no Redis store here: it gets the error below, at run time.
/// Name it (`dq_redis::RedisStore::connect`), or depend on `dq`.
pub async fn open(config: &Config) -> Result<Arc<dyn Store>> {
    let backends: Vec<&Backend> = inventory::iter::<Backend>.into_iter().collect();
    let Some(backend) = backends
        .iter()
        .find(|b| (b.serves)(config))
        .or_else(|| backends.first())
    else {
        return Err(Error::Config {
            key: "DQ_REDIS_URL",
            value: String::new(),
            reason: "no store crate is linked into this program: depend on the `dq` crate (or `dq-redis`) to connect to Redis".to_owned(),
        });
    };
    (backend.open)(config).await
}

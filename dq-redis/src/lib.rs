//! dq's Redis store: [`RedisStore`] keeps jobs in a Redis or a Redis Cluster, one Lua script
//! per operation, under the key layout of `keys`. Application code reaches it through the `dq`
//! crate (`dq::store::RedisStore`, and `dq::Client::connect`, which opens it).
//!
//! What is here: the connection to a single Redis or a cluster (`connection`, `url` for URLs
//! and TLS, `cluster` for where a command or a subscription goes on a cluster), the pub/sub
//! that wakes movers and consumers (`subscription`, `hub`), the key layout (`keys`), the
//! scripts (`scripts`, `src/lua/`), how a Redis failure is read (`error`), and the store
//! itself by role (`store`).

mod cluster;
mod connection;
mod error;
mod hub;
mod keys;
mod scripts;
mod store;
mod subscription;
mod url;

pub use self::store::{RedisStore, ACL_RULES};

/// Redis internals that tests and tools read (the key of a shard, the scripts' hashes in
/// `SLOWLOG`); not part of the documented API, and free to change between releases.
#[doc(hidden)]
pub mod internals {
    pub use crate::keys::ShardKeys;
    pub use crate::scripts::script_hashes;
}

inventory::submit! {
    dq_core::store::Backend {
        name: "redis",
        serves: |config| config.redis_url.is_some() || !config.redis_cluster.is_empty(),
        open: |config| Box::pin(async move {
            let store: std::sync::Arc<dyn dq_core::Store> =
                std::sync::Arc::new(RedisStore::connect(config).await?);
            Ok(store)
        }),
    }
}

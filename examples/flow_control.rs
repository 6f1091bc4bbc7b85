//! Flow control in front of someone else's API: card charges sent to a payment provider that
//! takes at most 20 calls a second and 4 at once, whose accounts must never be charged twice at
//! the same time, where a VIP's charge goes before the others, and where a runaway producer is
//! told "full" instead of filling Redis.
//!
//! ```sh
//! cargo run --example flow_control                                  # in-memory store
//! DQ_REDIS_URL=redis://127.0.0.1:6379/ cargo run --example flow_control
//! ```
//!
//! Every limit below holds across all worker processes together (run two copies against one
//! Redis and the provider still sees at most 20 calls a second and 4 at once): README, "Flow
//! control".

use std::time::{Duration, Instant};

use tracing::{info, warn};

/// A stand-in for the payment provider: it counts the calls in flight and records each call
/// (when, for which account), and answers "429, retry after 200 ms" to one call in forty, as
/// real providers do now and then even to well-behaved clients.
mod provider {
    use std::sync::{Arc, Mutex, MutexGuard};
    use std::time::{Duration, Instant};

    #[derive(Debug)]
    pub(crate) struct Call {
        pub(crate) account: String,
        pub(crate) charge: u64,
        pub(crate) started: Instant,
        pub(crate) ended: Instant,
    }

    #[derive(Debug, Default)]
    struct Books {
        in_flight: usize,
        most_in_flight: usize,
        calls: Vec<Call>,
        answered: u64,
    }

    /// Cheap to clone: clones share the books.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Provider {
        books: Arc<Mutex<Books>>,
    }

    impl Provider {
        fn books(&self) -> MutexGuard<'_, Books> {
            self.books.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// Charges `account`: `Err(retry_after)` for a 429.
        pub(crate) async fn charge(&self, account: &str, charge: u64) -> Result<(), Duration> {
            let started = Instant::now();
            {
                let mut b = self.books();
                b.answered += 1;
                if b.answered.is_multiple_of(40) {
                    return Err(Duration::from_millis(200));
                }
                b.in_flight += 1;
                b.most_in_flight = b.most_in_flight.max(b.in_flight);
            }
            // The provider's own work: 180 ms, so that at 20 starts a second about four calls
            // overlap: the rate sets the pace, and the global concurrency of 4 caps the peaks.
            tokio::time::sleep(Duration::from_millis(180)).await;
            let mut b = self.books();
            b.in_flight -= 1;
            b.calls.push(Call {
                account: account.to_owned(),
                charge,
                started,
                ended: Instant::now(),
            });
            Ok(())
        }

        pub(crate) fn most_in_flight(&self) -> usize {
            self.books().most_in_flight
        }

        pub(crate) fn take_calls(&self) -> Vec<Call> {
            std::mem::take(&mut self.books().calls)
        }
    }
}

mod handlers {
    use serde::{Deserialize, Serialize};
    use tracing::{info, warn};

    use crate::provider::Provider;

    /// "Charge this account": grouped by its `account` field, so one account's charges run one
    /// at a time, in push order, while other accounts' run beside them.
    #[derive(Debug, Serialize, Deserialize, dq::Message)]
    #[message(topic = "charge", group = "account")]
    pub(crate) struct Charge {
        pub(crate) account: String,
        pub(crate) charge: u64,
        pub(crate) cents: u64,
    }

    /// 20 starts a second and 4 running at once in all processes together (`concurrency` is
    /// this process' own bound), one charge per account at a time, and at most 100 charges
    /// pending: a push beyond that is refused with `ErrorKind::TopicFull` (in a batch, with
    /// `PushOutcome::Full` for each job refused).
    #[dq::listener(
        concurrency = 16,
        rate = "20/1s",
        global_concurrency = 4,
        group_concurrency = 1,
        max_pending = 100
    )]
    async fn charge_card(c: Charge, provider: dq::State<Provider>) -> dq::Outcome {
        match provider.charge(&c.account, c.charge).await {
            Ok(()) => {
                info!(account = %c.account, charge = c.charge, cents = c.cents, "charged");
                dq::Outcome::Done
            }
            // The provider's 429: the whole topic waits that long, in every process, and this
            // charge runs again first, without spending an attempt.
            Err(retry_after) => {
                warn!(account = %c.account, charge = c.charge, ?retry_after, "429 from the provider: topic held");
                dq::Outcome::RateLimited(retry_after)
            }
        }
    }
}

#[tokio::main]
async fn main() -> dq::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .init();
    let provider = provider::Provider::default();
    let rt = dq::Runtime::builder()
        .state(provider.clone())
        .start()
        .await?;
    let client = rt.client().clone();

    // Sixty charges for six accounts, pushed in one batch: account-0's ten charges must reach
    // the provider one at a time and in this order.
    let started = Instant::now();
    let charges = (0..60u64).map(|n| {
        let charge = handlers::Charge {
            account: format!("account-{}", n % 6),
            charge: n,
            cents: 100 + n,
        };
        client.push(charge).id(format!("charge-{n}"))
    });
    client.push_batch(charges).await?;
    // A VIP's charge, pushed after the sixty, runs before the ready charges of priority 0.
    let vip = handlers::Charge {
        account: "vip".into(),
        charge: 60,
        cents: 50_000,
    };
    client.push(vip).id("charge-vip").priority(5).await?;

    // A runaway producer: the topic holds at most 100 pending charges; the rest are refused.
    let flood = (0..200u64).map(|n| {
        let charge = handlers::Charge {
            account: format!("flood-{n}"),
            charge: 1000 + n,
            cents: 1,
        };
        client.push(charge).id(format!("flood-{n}"))
    });
    let outcomes = client.push_batch(flood).await?;
    let refused = outcomes
        .iter()
        .filter(|p| matches!(p.outcome, dq::push::PushOutcome::Full { .. }))
        .count();
    warn!(
        refused,
        "charges refused by max_pending: the producer was told the topic is full"
    );

    // Wait until every charge is handled.
    loop {
        let c = client.counts("charge").await?;
        if c.delayed + c.ready + c.running == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            tracing::error!(?c, "charges still pending after 60 s; giving up");
            rt.shutdown().await?;
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    let calls = provider.take_calls();
    let stats = client.stats("charge").await?;
    rt.shutdown().await?;

    // What the provider saw.
    let mut calls = calls;
    calls.sort_by_key(|c| c.started);
    let account_0: Vec<u64> = calls
        .iter()
        .filter(|c| c.account == "account-0")
        .map(|c| c.charge)
        .collect();
    let in_push_order = account_0.windows(2).all(|w| w[0] < w[1]);
    let one_account_at_a_time = !calls.iter().any(|a| {
        calls.iter().any(|b| {
            a.account == b.account
                && a.charge != b.charge
                && a.started < b.ended
                && b.started < a.ended
        })
    });
    let span = match (calls.first(), calls.last()) {
        (Some(first), Some(last)) => last.started - first.started,
        _ => Duration::ZERO,
    };
    let per_second = calls.len().saturating_sub(1) as f64 / span.as_secs_f64().max(1e-3);
    // The most calls that started within any one second: the rate's `most_in_one_period` (20
    // and its burst of 1) holds for the fetches; a handler calls a few milliseconds after its
    // fetch, and a busy machine may bunch two calls more into a second.
    let most_in_a_second = calls
        .iter()
        .map(|a| {
            let end = a.started + Duration::from_secs(1);
            calls
                .iter()
                .filter(|b| b.started >= a.started && b.started < end)
                .count()
        })
        .max()
        .unwrap_or(0);
    let vip_rank = calls.iter().position(|c| c.account == "vip");
    info!(
        calls = calls.len(),
        seconds = format!("{:.1}", took.as_secs_f64()),
        per_second = format!("{per_second:.1}"),
        most_in_a_second,
        most_at_once = provider.most_in_flight(),
        ?vip_rank,
        ?account_0,
        "what the provider saw"
    );
    info!(
        at_most_23_in_a_second = most_in_a_second <= 23,
        at_most_4_at_once = provider.most_in_flight() <= 4,
        one_account_at_a_time,
        in_push_order,
        vip_among_the_first_six = vip_rank.is_some_and(|r| r < 6),
        flood_refused = refused > 0,
        "limits held"
    );
    let shown = |limit: Option<String>| limit.unwrap_or_else(|| "none".into());
    info!(
        rate = shown(stats.rate.map(|r| r.to_string())),
        global_concurrency = shown(stats.global_concurrency.map(|n| n.to_string())),
        max_pending = shown(stats.max_pending.map(|n| n.to_string())),
        "the topic's limits, as `dq stats` shows them"
    );
    Ok(())
}

// A std MutexGuard held across an `.await` makes the handler's future not `Send`: the error
// names the guard and the await.
use std::sync::Mutex;

static SEEN: Mutex<Vec<u64>> = Mutex::new(Vec::new());

#[dq::listener(topic = "t")]
async fn handler(n: u64) {
    let mut seen = SEEN.lock().unwrap();
    tokio::task::yield_now().await;
    seen.push(n);
}

fn main() {}

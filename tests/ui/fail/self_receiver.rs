struct Service;

impl Service {
    #[dq::listener(topic = "t")]
    async fn handler(&self, _n: u64) {}
}

fn main() {}

// Extractors after the payload, in any order: state of two types, the context, the client
// and a user-written extractor.
#[derive(Clone)]
struct Shop;
#[derive(Clone)]
struct Mailer;

struct Tenant;
impl dq::FromJob for Tenant {
    fn from_job(_job: &dq::JobContext) -> Result<Self, dq::Outcome> {
        Ok(Tenant)
    }
}

#[dq::listener(topic = "a")]
async fn a(_n: u64, _shop: dq::State<Shop>, _ctx: dq::JobContext, _mail: dq::State<Mailer>) {}

#[dq::listener(topic = "b")]
async fn b(_n: u64, _mail: dq::State<Mailer>, _client: dq::Client, _tenant: Tenant) -> Result<(), String> {
    Ok(())
}

#[dq::listener(topic = "c")]
async fn c(_n: String) {}

fn main() {
    let _ = dq::Listener::new("d", |_n: u64, _t: Tenant, _s: dq::State<Shop>| async {});
}

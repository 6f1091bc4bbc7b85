// The runtime serves at most eight arguments after the payload.
#[dq::listener(topic = "t")]
async fn handler(
    _n: u64,
    _a: dq::JobContext,
    _b: dq::JobContext,
    _c: dq::JobContext,
    _d: dq::JobContext,
    _e: dq::JobContext,
    _f: dq::JobContext,
    _g: dq::JobContext,
    _h: dq::JobContext,
    _i: dq::JobContext,
) {
}

fn main() {}

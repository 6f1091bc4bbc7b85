//! Compile-time behaviour of `#[dq::listener]` and `#[derive(dq::Message)]`: what builds, and
//! the exact error (with its span) for each misuse. Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test --test macros` and review the diff.

#[test]
fn listener_and_message_macros() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

//! The procedural macros of dq: `#[dq::listener]` and `#[derive(dq::Message)]`.
//! Use them through the `dq` crate; the generated code names only `::dq::...` paths (or the
//! path given with `crate = "..."`).

use proc_macro::TokenStream;

mod attr;
mod listener;
mod message;
mod options;

/// Registers an async fn as the handler of a topic. See `dq::listener` for the options.
#[proc_macro_attribute]
pub fn listener(attr: TokenStream, item: TokenStream) -> TokenStream {
    listener_or_error(attr.into(), item.into()).into()
}

/// The expansion, or the error beside the function as written (as tokio's macros do): the
/// function still exists for the code and the tools (rust-analyzer) that use it, so one mistake
/// is one error.
fn listener_or_error(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    match listener::expand(attr, item.clone()) {
        Ok(expanded) => expanded,
        Err(e) => {
            let error = e.into_compile_error();
            quote::quote!(#error #item)
        }
    }
}

/// Binds a payload type to its topic: `#[message(topic = "order-cancel")]`. A mistake is an
/// error beside an impl with an empty topic, so code using the type adds no error of its own.
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(item: TokenStream) -> TokenStream {
    message::expand(item.into()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_with_a_mistake_keeps_its_function_beside_the_error() {
        let out = listener_or_error(
            quote::quote!(topic = "t", colour = "red"),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        )
        .to_string();
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("async fn handler"), "{out}");
    }

    /// The expansion with its spaces removed, to look for code in it.
    fn expanded(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> String {
        listener_or_error(attr, item).to_string().replace(' ', "")
    }

    #[test]
    fn a_listener_is_built_by_listener_new_and_the_builder() {
        let out = expanded(
            quote::quote!(topic = "t", concurrency = 4, timeout = "none", every = "1h"),
            quote::quote!(
                async fn handler(_n: u64, _ctx: dq::JobContext) {}
            ),
        );
        assert!(
            out.contains("::dq::Listener::new::<u64,(__DqArg0,),__DqFn>(topic,handler)"),
            "{out}"
        );
        assert!(
            out.contains("__dq_handler::<dq::JobContext,(),_,_>(\"t\",handler)"),
            "{out}"
        );
        for call in [
            ".concurrency(4usize)",
            ".no_timeout()",
            ".every(",
            ".with_tick_payload(",
        ] {
            assert!(out.contains(call), "{call} in {out}");
        }
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn a_listener_retaining_results_sets_them_with_the_builder() {
        let out = expanded(
            quote::quote!(topic = "t", retain = "1h", retain_count = 1000),
            quote::quote!(
                async fn handler(_n: u64) -> Result<u64, String> {
                    Ok(1)
                }
            ),
        );
        assert!(
            out.contains(".retain(::core::time::Duration::new(3600u64,0u32))"),
            "{out}"
        );
        assert!(out.contains(".retain_count(1000u64)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn a_listener_with_events_turns_them_on_with_the_builder() {
        let out = expanded(
            quote::quote!(topic = "t", events = true, events_cap = 50000),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(out.contains(".events(true)"), "{out}");
        assert!(out.contains(".events_cap(50000u64)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        let off = expanded(
            quote::quote!(topic = "t", events = false),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(
            !off.contains(".events(") && !off.contains("compile_error"),
            "{off}"
        );
    }

    #[test]
    fn a_rate_becomes_the_builder_call_with_its_count_and_period() {
        let out = expanded(
            quote::quote!(topic = "t", rate = "100/250ms"),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(out.contains(".rate(::dq::Rate::new(100u64,"), "{out}");
        assert!(out.contains("Duration::new(0u64,250000000u32)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn a_group_rate_becomes_the_builder_call_and_a_bad_one_is_refused() {
        let out = expanded(
            quote::quote!(topic = "t", group_concurrency = 1, group_rate = "10/1s"),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(out.contains(".group_rate(::dq::Rate::new(10u64,"), "{out}");
        assert!(out.contains("Duration::new(1u64,0u32)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        let bad = expanded(
            quote::quote!(topic = "t", group_rate = "0/1s"),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(bad.contains("invalidrate"), "{bad}");
    }

    #[test]
    fn global_concurrency_becomes_the_builder_call_and_zero_is_refused() {
        let out = expanded(
            quote::quote!(topic = "t", global_concurrency = 10),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(out.contains(".global_concurrency(10u32)"), "{out}");
        let zero = expanded(
            quote::quote!(topic = "t", global_concurrency = 0),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(zero.contains("global_concurrencymustbeatleast1"), "{zero}");
    }

    #[test]
    fn max_pending_becomes_the_builder_call_and_zero_is_refused() {
        let out = expanded(
            quote::quote!(topic = "t", max_pending = 100000),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(out.contains(".max_pending(100000u64)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        let zero = expanded(
            quote::quote!(topic = "t", max_pending = 0),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(zero.contains("max_pendingmustbeatleast1"), "{zero}");
    }

    #[test]
    fn events_that_are_not_a_bool_or_a_cap_without_events_are_refused() {
        for (attr, why) in [
            (
                quote::quote!(topic = "t", events = "yes"),
                "`events`is`true`or`false`",
            ),
            (
                quote::quote!(topic = "t", events_cap = 10),
                "`events_cap`goeswith`events=true`",
            ),
            (
                quote::quote!(topic = "t", events = false, events_cap = 10),
                "`events_cap`goeswith`events=true`",
            ),
            (
                quote::quote!(topic = "t", events = true, events_cap = 0),
                "events_capmustbeatleast1",
            ),
        ] {
            let out = expanded(
                attr,
                quote::quote!(
                    async fn handler(_n: u64) {}
                ),
            );
            assert!(
                out.contains("compile_error") && out.contains(why),
                "{why}: {out}"
            );
        }
    }

    #[test]
    fn a_retain_count_without_retain_is_refused() {
        let out = expanded(
            quote::quote!(topic = "t", retain_count = 1000),
            quote::quote!(
                async fn handler(_n: u64) {}
            ),
        );
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("`retain_count`goeswith`retain`"), "{out}");
        for zero in [
            quote::quote!(topic = "t", retain = "1h", retain_count = 0),
            quote::quote!(topic = "t", retain = "0s"),
        ] {
            let out = expanded(
                zero,
                quote::quote!(
                    async fn handler(_n: u64) {}
                ),
            );
            assert!(out.contains("compile_error"), "{out}");
        }
    }

    #[test]
    fn a_listener_taking_an_extractor_first_is_told_that_the_payload_comes_first() {
        for payload in [
            quote::quote!(JobContext),
            quote::quote!(dq::JobContext),
            quote::quote!(State<Shop>),
            quote::quote!(dq::Client),
        ] {
            let out = expanded(
                quote::quote!(topic = "t"),
                quote::quote!(
                    async fn handler(_first: #payload) {}
                ),
            );
            assert!(
                out.contains("thefirstargumentofalisteneristhepayload"),
                "{out}"
            );
        }
        // The application's own messages may have these names.
        for payload in [
            quote::quote!(Client),
            quote::quote!(State),
            quote::quote!(app::State<u8>),
        ] {
            let out = expanded(
                quote::quote!(topic = "t"),
                quote::quote!(
                    async fn handler(_first: #payload) {}
                ),
            );
            assert!(!out.contains("compile_error"), "{out}");
        }
    }

    #[test]
    fn a_message_with_a_bad_topic_is_one_error_beside_its_impl() {
        let out = message::expand(quote::quote!(
            #[message(topic = "order cancel")]
            struct OrderCancel;
        ))
        .to_string()
        .replace(' ', "");
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("impl::dq::MessageforOrderCancel"), "{out}");
    }
}

//! The procedural macros of dq: `#[dq::listener]` and `#[derive(dq::Message)]`.
//! Use them through the `dq` crate; the generated code names only `::dq::...` paths (or the
//! path given with `crate = "..."`).

use proc_macro::TokenStream;

mod attr;
mod listener;
mod message;

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

/// Binds a payload type to its topic: `#[message(topic = "order-cancel")]`.
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(item: TokenStream) -> TokenStream {
    message::expand(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
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
}

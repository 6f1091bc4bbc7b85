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
    listener::expand(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Binds a payload type to its topic: `#[message(topic = "order-cancel")]`.
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(item: TokenStream) -> TokenStream {
    message::expand(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

//! `#[derive(Message)]`: `impl dq::Message for T { const TOPIC: &str = "..."; }`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, LitStr};

use crate::attr;

pub(crate) fn expand(item: TokenStream) -> syn::Result<TokenStream> {
    let input: DeriveInput = syn::parse2(item)?;
    let mut topic: Option<LitStr> = None;
    let mut krate: Option<LitStr> = None;
    for a in input.attrs.iter().filter(|a| a.path().is_ident("message")) {
        a.parse_nested_meta(|meta| {
            if meta.path.is_ident("topic") {
                if topic.is_some() {
                    return Err(meta.error("`topic` is given twice"));
                }
                topic = Some(attr::topic(&meta.value()?.parse()?)?);
            } else if meta.path.is_ident("crate") {
                krate = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error(
                    "unknown message option; expected `topic = \"...\"` or `crate = \"...\"`",
                ));
            }
            Ok(())
        })?;
    }
    let Some(topic) = topic else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Message)] needs the topic: add #[message(topic = \"order-cancel\")]",
        ));
    };
    let krate = attr::crate_path(krate)?;
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #krate::Message for #name #ty_generics #where_clause {
            const TOPIC: &'static str = #topic;
        }
    })
}

//! `#[derive(Message)]`: `impl dq::Message for T { const TOPIC: &str = "..."; }`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, LitStr};

use crate::attr;

/// What `#[message(...)]` says, before its topic is checked.
#[derive(Default)]
struct Attributes {
    topic: Option<LitStr>,
    /// The field holding the job's group (`group = "account"`).
    group: Option<LitStr>,
    krate: Option<LitStr>,
}

pub(crate) fn expand(item: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(item) {
        Ok(input) => input,
        Err(e) => return e.into_compile_error(),
    };
    let attributes = match attributes(&input) {
        Ok(attributes) => attributes,
        Err(e) => return e.into_compile_error(),
    };
    let krate = match attr::crate_path(attributes.krate.clone()) {
        Ok(krate) => krate,
        Err(e) => return e.into_compile_error(),
    };
    match checked_topic(&input, attributes.topic) {
        Ok(topic) => match group_field(&input, attributes.group.as_ref()) {
            Ok(group) => message_impl(&input, &krate, &topic, group.as_ref()),
            Err(e) => {
                let error = e.into_compile_error();
                let placeholder = message_impl(&input, &krate, &topic, None);
                quote!(#error #placeholder)
            }
        },
        Err(e) => {
            // The impl still, with an empty topic: a listener taking this type, or a push of
            // it, then adds no error of its own to the one that says what to fix.
            let error = e.into_compile_error();
            let placeholder =
                message_impl(&input, &krate, &LitStr::new("", input.ident.span()), None);
            quote!(#error #placeholder)
        }
    }
}

fn attributes(input: &DeriveInput) -> syn::Result<Attributes> {
    let mut found = Attributes::default();
    for a in input.attrs.iter().filter(|a| a.path().is_ident("message")) {
        a.parse_nested_meta(|meta| {
            if meta.path.is_ident("topic") {
                if found.topic.is_some() {
                    return Err(meta.error("`topic` is given twice"));
                }
                found.topic = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("group") {
                if found.group.is_some() {
                    return Err(meta.error("`group` is given twice"));
                }
                found.group = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("crate") {
                found.krate = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error(
                    "unknown message option; expected `topic = \"...\"`, `group = \"<field>\"` or `crate = \"...\"`",
                ));
            }
            Ok(())
        })?;
    }
    Ok(found)
}

/// The topic, present and valid (with the rules of `dq::Topic`, so a bad topic fails the
/// build).
fn checked_topic(input: &DeriveInput, topic: Option<LitStr>) -> syn::Result<LitStr> {
    let Some(topic) = topic else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Message)] needs the topic: add #[message(topic = \"order-cancel\")]",
        ));
    };
    attr::topic(&topic)
}

/// The field `group = "..."` names: a named field of the struct (its value, printed with
/// `Display`, is the job's group key).
fn group_field(input: &DeriveInput, group: Option<&LitStr>) -> syn::Result<Option<syn::Ident>> {
    let Some(group) = group else {
        return Ok(None);
    };
    let syn::Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            group.span(),
            "`group` names a field of the message: it needs a struct with named fields",
        ));
    };
    let wanted = group.value();
    let found = data
        .fields
        .iter()
        .filter_map(|f| f.ident.clone())
        .find(|ident| *ident == wanted);
    match found {
        Some(ident) => Ok(Some(ident)),
        None => Err(syn::Error::new(
            group.span(),
            format!("`group = \"{wanted}\"`: the message has no field `{wanted}`; name the field that holds the job's group (an account, a tenant)"),
        )),
    }
}

fn message_impl(
    input: &DeriveInput,
    krate: &syn::Path,
    topic: &LitStr,
    group: Option<&syn::Ident>,
) -> TokenStream {
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let group = group.map(|field| {
        quote! {
            fn group(&self) -> ::std::option::Option<::std::string::String> {
                ::std::option::Option::Some(::std::string::ToString::to_string(&self.#field))
            }
        }
    });
    quote! {
        impl #impl_generics #krate::Message for #name #ty_generics #where_clause {
            const TOPIC: &'static str = #topic;
            #group
        }
    }
}

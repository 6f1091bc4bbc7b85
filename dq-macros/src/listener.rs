//! `#[listener(...)]`: keeps the async fn as written and registers beside it the listener
//! `Listener::new(topic, the_fn)` builds, with the options applied by `Listener`'s builder. The
//! runtime's `Handler` is then what extracts the arguments, for a macro's listener as for one
//! written by hand.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, Type};

use crate::attr;
use crate::options::{self, Options};

/// Most arguments after the payload: the arities the runtime's `Handler` is implemented for.
const MAX_EXTRACTORS: usize = 8;

/// What the macro reads in the function's signature.
struct Signature<'a> {
    name: &'a Ident,
    payload: &'a Type,
    /// The arguments after the payload: extractors, in any order.
    extractors: Vec<&'a Type>,
    output: Option<&'a Type>,
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = options::parse(attr)?;
    let func: ItemFn = syn::parse2(item)?;
    let sig = signature(&func.sig)?;
    options::check_schedule(&options, sig.payload)?;
    options::check_retention(&options)?;
    options::check_events(&options)?;
    let krate = attr::crate_path(options.krate.clone())?;
    Ok(registration(&func, &sig, &options, &krate))
}

/// The payload, the extractors and the return type, or the error of a function that cannot
/// be a listener.
fn signature(sig: &syn::Signature) -> syn::Result<Signature<'_>> {
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "#[dq::listener] goes on an `async fn`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a listener cannot be generic: the payload type decides how jobs are decoded",
        ));
    }
    let mut types = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Typed(t) => types.push(&*t.ty),
            FnArg::Receiver(r) => return Err(no_self(r)),
        }
    }
    let Some((&payload, extractors)) = types.split_first() else {
        return Err(syn::Error::new(
            sig.paren_token.span.join(),
            "a listener takes the payload as its first argument, as in `msg: OrderCancel`",
        ));
    };
    payload_not_an_extractor(payload)?;
    if let Some(extra) = extractors.get(MAX_EXTRACTORS) {
        return Err(syn::Error::new_spanned(
            extra,
            "a listener takes at most eight arguments after its payload: gather values in one `State<T>`, or in a `FromJob` type of yours",
        ));
    }
    let output = match &sig.output {
        syn::ReturnType::Type(_, ty) => Some(&**ty),
        syn::ReturnType::Default => None,
    };
    Ok(Signature {
        name: &sig.ident,
        payload,
        extractors: extractors.to_vec(),
        output,
    })
}

fn no_self(r: &syn::Receiver) -> syn::Error {
    syn::Error::new(
        r.span(),
        "a listener cannot take `self`: use a free async fn and ask for shared values with `dq::State<T>` (registered with `Runtime::builder().state(value)`)",
    )
}

/// A listener whose first argument is one of dq's extractors has left out its payload: said
/// here, since rustc would only say that the extractor cannot be deserialized.
fn payload_not_an_extractor(payload: &Type) -> syn::Result<()> {
    if !names_an_extractor(payload) {
        return Ok(());
    }
    Err(syn::Error::new_spanned(
        payload,
        "the first argument of a listener is the payload (a type that implements `Deserialize`); `JobContext`, `State<T>` and `Client` come after it, as in `async fn handler(msg: OrderCancel, ctx: dq::JobContext)`",
    ))
}

/// `JobContext` and `State<..>`, bare or as `dq::..`, and `dq::Client` (a bare `Client` may
/// well be the application's own message).
fn names_an_extractor(ty: &Type) -> bool {
    let Type::Path(p) = ty else { return false };
    let segments = &p.path.segments;
    let Some(last) = segments.last() else {
        return false;
    };
    let from_dq = segments.len() == 2 && segments[0].ident == "dq";
    let bare = segments.len() == 1 && p.path.leading_colon.is_none();
    let generic = matches!(last.arguments, syn::PathArguments::AngleBracketed(_));
    if p.qself.is_some() || !(bare || from_dq) {
        return false;
    }
    if last.ident == "JobContext" {
        return true;
    }
    if last.ident == "State" {
        return generic;
    }
    last.ident == "Client" && from_dq
}

/// The function as written, and beside it the registration of its listener.
fn registration(
    func: &ItemFn,
    sig: &Signature<'_>,
    options: &Options,
    krate: &syn::Path,
) -> TokenStream {
    let name = sig.name;
    let handler_fn = handler_fn(sig, krate);
    let new_listener = new_listener(sig, options, krate);
    let builder_calls = options::builder_calls(options, sig.payload, krate);
    quote! {
        #func

        const _: () = {
            #handler_fn
            fn __dq_listener() -> #krate::Listener {
                #new_listener #builder_calls
            }
            #krate::__private::inventory::submit! {
                #krate::__private::ListenerRegistration {
                    listener: __dq_listener,
                    name: ::core::stringify!(#name),
                    module: ::core::module_path!(),
                    file: ::core::file!(),
                    line: ::core::line!(),
                }
            }
        };
    }
}

/// `Listener::new(topic, the_fn)`, through a function generic in each argument after the
/// payload and in the return type. Its bounds are checked where it is called, against the
/// types as written: an argument that is not an extractor is reported at that argument, a
/// return type the runtime cannot read at the return type, a future that is not `Send` at the
/// function's name (or its return type), each once. Inside, `Listener::new` needs nothing more.
fn handler_fn(sig: &Signature<'_>, krate: &syn::Path) -> TokenStream {
    let payload = sig.payload;
    let args: Vec<Ident> = (0..sig.extractors.len())
        .map(|i| format_ident!("__DqArg{}", i))
        .collect();
    quote! {
        fn __dq_handler<#(#args,)* __DqOutput, __DqFuture, __DqFn>(
            topic: &str,
            handler: __DqFn,
        ) -> #krate::Listener
        where
            #(#args: #krate::FromJob,)*
            __DqOutput: #krate::runtime::IntoOutcome,
            __DqFuture: ::core::future::Future<Output = __DqOutput>
                + ::core::marker::Send
                + 'static,
            __DqFn: ::core::ops::Fn(#payload #(, #args)*) -> __DqFuture
                + ::core::marker::Send
                + ::core::marker::Sync
                + 'static,
        {
            #krate::Listener::new::<#payload, (#(#args,)*), __DqFn>(topic, handler)
        }
    }
}

/// The call of [`handler_fn`]'s function with the signature's own types (so that rustc points
/// at them) and the listener's topic.
fn new_listener(sig: &Signature<'_>, options: &Options, krate: &syn::Path) -> TokenStream {
    let extractors = &sig.extractors;
    let payload = sig.payload;
    let name = sig.name;
    let (output, future_span) = match sig.output {
        Some(ty) => (quote!(#ty), ty.span()),
        None => (quote!(()), name.span()),
    };
    let future = quote_spanned!(future_span=> _);
    let topic = match &options.topic {
        Some(t) => quote!(#t),
        None => quote_spanned!(payload.span()=> <#payload as #krate::Message>::TOPIC),
    };
    quote!(__dq_handler::<#(#extractors,)* #output, #future, _>(#topic, #name))
}

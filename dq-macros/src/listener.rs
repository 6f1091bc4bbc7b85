//! `#[listener(...)]`: keeps the async fn as written and registers a listener beside it.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, LitInt, LitStr};

use crate::attr;

const KEYS: &str = "topic, concurrency, timeout, retries, backoff, cron, tz, every, missed, crate";

#[derive(Default)]
struct Options {
    topic: Option<LitStr>,
    concurrency: Option<usize>,
    timeout: Option<Option<Duration>>,
    retries: Option<u32>,
    backoff: Option<TokenStream>,
    cron: Option<LitStr>,
    tz: Option<LitStr>,
    every: Option<Duration>,
    missed: Option<TokenStream>,
    krate: Option<LitStr>,
}

fn parse_options(attr: TokenStream) -> syn::Result<Options> {
    let mut o = Options::default();
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        if seen.contains(&key) {
            return Err(meta.error(format!("`{key}` is given twice")));
        }
        seen.push(key.clone());
        match key.as_str() {
            "topic" => o.topic = Some(attr::topic(&meta.value()?.parse()?)?),
            "concurrency" => {
                let lit: LitInt = meta.value()?.parse()?;
                let n: usize = lit.base10_parse()?;
                if n == 0 {
                    return Err(syn::Error::new(
                        lit.span(),
                        "concurrency must be at least 1",
                    ));
                }
                o.concurrency = Some(n);
            }
            "timeout" => {
                let lit: LitStr = meta.value()?.parse()?;
                o.timeout = Some(if lit.value() == "none" {
                    None
                } else {
                    Some(attr::duration(&lit)?)
                });
            }
            "retries" => {
                let lit: LitInt = meta.value()?.parse()?;
                o.retries = Some(lit.base10_parse()?);
            }
            "backoff" => o.backoff = Some(backoff(&meta.value()?.parse()?)?),
            "cron" => o.cron = Some(meta.value()?.parse()?),
            "tz" => o.tz = Some(meta.value()?.parse()?),
            "every" => o.every = Some(attr::duration(&meta.value()?.parse()?)?),
            "missed" => o.missed = Some(missed(&meta.value()?.parse()?)?),
            "crate" => o.krate = Some(meta.value()?.parse()?),
            _ => {
                return Err(meta.error(format!(
                    "unknown listener option `{}`; expected one of: {KEYS}",
                    quote::ToTokens::to_token_stream(&meta.path)
                )))
            }
        }
        Ok(())
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(o)
}

/// `"fixed:5s"`, `"exponential:1s"` or just `"1s"` (exponential).
fn backoff(lit: &LitStr) -> syn::Result<TokenStream> {
    let value = lit.value();
    let (kind, rest) = match value.split_once(':') {
        Some((k, r)) => (k.trim().to_owned(), r.trim().to_owned()),
        None => ("exponential".to_owned(), value.clone()),
    };
    let d = attr::duration_tokens(attr::duration(&LitStr::new(&rest, lit.span()))?);
    match kind.as_str() {
        "fixed" => Ok(quote!(Fixed(#d))),
        "exponential" | "exp" => Ok(quote!(exponential(#d))),
        _ => Err(syn::Error::new(
            lit.span(),
            format!("invalid backoff {value:?}: use \"fixed:5s\", \"exponential:1s\" or \"1s\""),
        )),
    }
}

/// `"skip"`, `"run_once"` or `"all:N"` (at most N catch-up jobs).
fn missed(lit: &LitStr) -> syn::Result<TokenStream> {
    let value = lit.value();
    let bad = || {
        syn::Error::new(
            lit.span(),
            format!("invalid missed-tick policy {value:?}: use \"skip\", \"run_once\" or \"all:N\" (at most N catch-up jobs)"),
        )
    };
    match value.trim() {
        "skip" => Ok(quote!(Skip)),
        "run_once" => Ok(quote!(RunOnce)),
        other => {
            let max: u32 = other
                .strip_prefix("all:")
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(bad)?;
            Ok(quote!(All { max: #max }))
        }
    }
}

/// The schedule a listener declares, checked for what can be checked without the zone
/// database (the expression and the zone are checked by `Runtime::start`).
fn schedule(options: &Options, krate: &syn::Path, payload: &syn::Type) -> syn::Result<TokenStream> {
    let some_str = |l: &Option<LitStr>| match l {
        Some(l) => quote!(::core::option::Option::Some(#l)),
        None => quote!(::core::option::Option::None),
    };
    match (&options.cron, options.every, &options.tz) {
        (None, None, None) if options.missed.is_none() => {
            return Ok(quote!(::core::option::Option::None))
        }
        (None, None, _) => {
            return Err(syn::Error::new(
                Span::call_site(),
                "`tz` and `missed` go with a schedule: add `cron = \"0 9 * * MON-FRI\"` or `every = \"5m\"`",
            ))
        }
        (Some(c), Some(_), _) => {
            return Err(syn::Error::new(
                c.span(),
                "give either `cron` or `every`, not both",
            ))
        }
        (None, Some(_), Some(tz)) => {
            return Err(syn::Error::new(
                tz.span(),
                "`tz` goes with `cron`: an `every` schedule ticks at multiples of its interval since 1970-01-01 UTC",
            ))
        }
        _ => {}
    }
    if options.topic.is_none() && type_name_is(payload, "Tick") {
        return Err(syn::Error::new(
            payload.span(),
            "a `Tick` has no topic of its own: give the listener one, as in `#[dq::listener(topic = \"nightly-report\", cron = \"0 3 * * *\")]`",
        ));
    }
    let cron = some_str(&options.cron);
    let tz = some_str(&options.tz);
    let every = match options.every {
        Some(d) => {
            let d = attr::duration_tokens(d);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    };
    let missed = options.missed.clone().unwrap_or(quote!(Skip));
    // Spanned by the payload type: a type that is neither a Tick nor a Default message is
    // reported there.
    let payload_fn =
        quote_spanned!(payload.span()=> <#payload as #krate::__private::TickPayload>::tick_payload);
    Ok(quote! {
        ::core::option::Option::Some(#krate::__private::ListenerSchedule {
            cron: #cron,
            every: #every,
            tz: #tz,
            missed: #krate::schedule::Missed::#missed,
            payload: #payload_fn,
        })
    })
}

fn type_name_is(ty: &syn::Type, name: &str) -> bool {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == name),
        _ => false,
    }
}

fn no_self(r: &syn::Receiver) -> syn::Error {
    syn::Error::new(
        r.span(),
        "a listener cannot take `self`: use a free async fn and ask for shared values with `dq::State<T>` (registered with `Runtime::builder().state(value)`)",
    )
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = parse_options(attr)?;
    let func: ItemFn = syn::parse2(item)?;
    let sig = &func.sig;
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
    let mut args = sig.inputs.iter();
    let payload = match args.next() {
        None => {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                "a listener takes the payload as its first argument, as in `msg: OrderCancel`",
            ))
        }
        Some(FnArg::Receiver(r)) => return Err(no_self(r)),
        Some(FnArg::Typed(t)) => t.ty.clone(),
    };
    // After the payload: extractors, in any order.
    let mut extractors = Vec::new();
    for arg in args {
        match arg {
            FnArg::Typed(t) => extractors.push(t.ty.clone()),
            FnArg::Receiver(r) => return Err(no_self(r)),
        }
    }

    let krate = attr::crate_path(options.krate.clone())?;
    let schedule = schedule(&options, &krate, &payload)?;
    let name = &sig.ident;
    let topic = match options.topic {
        Some(t) => quote!(#t),
        None => quote_spanned!(payload.span()=> <#payload as #krate::Message>::TOPIC),
    };
    let some = |t: Option<TokenStream>| match t {
        Some(t) => quote!(::core::option::Option::Some(#t)),
        None => quote!(::core::option::Option::None),
    };
    let concurrency = some(options.concurrency.map(|n| quote!(#n)));
    let timeout = some(options.timeout.map(|t| some(t.map(attr::duration_tokens))));
    let retries = some(options.retries.map(|n| quote!(#n)));
    let backoff = some(options.backoff.map(|b| quote!(#krate::Backoff::#b)));
    let call_fn = syn::Ident::new("__dq_listener_call", Span::mixed_site());
    let check_fn = syn::Ident::new("__dq_listener_check", Span::mixed_site());
    let job = syn::Ident::new("job", Span::mixed_site());
    let message = syn::Ident::new("message", Span::mixed_site());
    let states = syn::Ident::new("states", Span::mixed_site());
    let values: Vec<syn::Ident> = (0..extractors.len())
        .map(|i| syn::Ident::new(&format!("arg{i}"), Span::mixed_site()))
        .collect();
    // Each extraction spanned by its argument's type, so a type that is not an extractor is
    // reported there.
    let extract = extractors.iter().zip(&values).map(|(ty, value)| {
        quote_spanned!(ty.span()=>
            let #value = match #krate::__private::extract::<#ty>(&#job) {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(rejected) => return ::core::result::Result::Ok(rejected),
            };
        )
    });
    let checks = extractors
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> <#ty as #krate::FromJob>::check(#states)?;));
    // Spanned by the return type, so a type the runtime cannot read, or a future that is not
    // `Send`, is reported there (rustc's notes then name the local held across an `.await`).
    let (call_span, output) = match &sig.output {
        syn::ReturnType::Type(_, ty) => (ty.span(), quote!(#ty)),
        syn::ReturnType::Default => (name.span(), quote!(())),
    };
    let future = syn::Ident::new("__dq_future", call_span);
    let invoke = quote_spanned! {call_span=>
        let #future = #name(#message, #(#values),*);
        ::core::result::Result::Ok(#krate::__private::erase::<_, #output>(#future))
    };
    Ok(quote! {
        #func

        const _: () = {
            fn #call_fn(
                payload: &[u8],
                #job: #krate::JobContext,
            ) -> ::core::result::Result<#krate::__private::HandlerFuture, ::std::string::String> {
                let #message = #krate::__private::decode::<#payload>(payload)?;
                #(#extract)*
                #invoke
            }
            fn #check_fn(
                #states: &#krate::__private::States,
            ) -> ::core::result::Result<(), ::std::string::String> {
                #(#checks)*
                ::core::result::Result::Ok(())
            }
            #krate::__private::inventory::submit! {
                #krate::__private::ListenerRegistration {
                    topic: #topic,
                    concurrency: #concurrency,
                    timeout: #timeout,
                    retries: #retries,
                    backoff: #backoff,
                    call: #call_fn,
                    check: #check_fn,
                    name: ::core::stringify!(#name),
                    schedule: #schedule,
                    module: ::core::module_path!(),
                    file: ::core::file!(),
                    line: ::core::line!(),
                }
            }
        };
    })
}

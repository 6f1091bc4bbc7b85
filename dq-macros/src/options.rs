//! The options of `#[listener(...)]`: parsed, checked, and turned into the calls of
//! `Listener`'s builder that a listener written by hand would make.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Lit, LitInt, LitStr, Type};

use crate::attr;

const KEYS: &str =
    "topic, concurrency, timeout, retries, backoff, cron, tz, every, missed, retain, retain_count, events, events_cap, max_pending, rate, global_concurrency, group_concurrency, group_rate, crate";

#[derive(Default)]
pub(crate) struct Options {
    pub(crate) topic: Option<LitStr>,
    concurrency: Option<usize>,
    timeout: Option<Option<Duration>>,
    retries: Option<u32>,
    backoff: Option<TokenStream>,
    cron: Option<LitStr>,
    tz: Option<LitStr>,
    every: Option<Duration>,
    missed: Option<TokenStream>,
    retain: Option<Duration>,
    /// The count, and its literal (where a count without `retain` is reported).
    retain_count: Option<(u64, LitInt)>,
    events: Option<bool>,
    /// The cap, and its literal (where a cap without `events = true` is reported).
    events_cap: Option<(u64, LitInt)>,
    max_pending: Option<u64>,
    /// Jobs per period (`rate = "100/1s"`).
    rate: Option<(u64, Duration)>,
    /// The most jobs running at once in all processes (`global_concurrency = 10`).
    global_concurrency: Option<u32>,
    /// The most jobs of one group holding a slot at once (`group_concurrency = 2`).
    group_concurrency: Option<u32>,
    /// Jobs of one group per period (`group_rate = "10/1s"`).
    group_rate: Option<(u64, Duration)>,
    pub(crate) krate: Option<LitStr>,
}

pub(crate) fn parse(attr: TokenStream) -> syn::Result<Options> {
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
        set(&mut o, &key, &meta)
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(o)
}

/// Reads the value of option `key` into `o`.
fn set(o: &mut Options, key: &str, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    match key {
        "topic" => o.topic = Some(attr::topic(&meta.value()?.parse()?)?),
        "concurrency" => o.concurrency = Some(concurrency(&meta.value()?.parse()?)?),
        "timeout" => o.timeout = Some(timeout(&meta.value()?.parse()?)?),
        "retries" => o.retries = Some(meta.value()?.parse::<LitInt>()?.base10_parse()?),
        "backoff" => o.backoff = Some(backoff(&meta.value()?.parse()?)?),
        "cron" => o.cron = Some(meta.value()?.parse()?),
        "tz" => o.tz = Some(meta.value()?.parse()?),
        "every" => o.every = Some(attr::duration(&meta.value()?.parse()?)?),
        "missed" => o.missed = Some(missed(&meta.value()?.parse()?)?),
        "retain" => o.retain = Some(attr::duration(&meta.value()?.parse()?)?),
        "retain_count" => o.retain_count = Some(retain_count(meta.value()?.parse()?)?),
        "events" => o.events = Some(events(&meta.value()?.parse()?)?),
        "events_cap" => o.events_cap = Some(events_cap(meta.value()?.parse()?)?),
        "max_pending" => o.max_pending = Some(max_pending(&meta.value()?.parse()?)?),
        "rate" => o.rate = Some(rate(&meta.value()?.parse()?)?),
        "global_concurrency" => {
            o.global_concurrency = Some(global_concurrency(&meta.value()?.parse()?)?)
        }
        "group_concurrency" => {
            o.group_concurrency = Some(group_concurrency(&meta.value()?.parse()?)?)
        }
        "group_rate" => o.group_rate = Some(rate(&meta.value()?.parse()?)?),
        "crate" => o.krate = Some(meta.value()?.parse()?),
        _ => {
            return Err(meta.error(format!(
                "unknown listener option `{}`; expected one of: {KEYS}",
                quote::ToTokens::to_token_stream(&meta.path)
            )))
        }
    }
    Ok(())
}

fn concurrency(lit: &LitInt) -> syn::Result<usize> {
    let n: usize = lit.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "concurrency must be at least 1",
        ));
    }
    Ok(n)
}

/// The most records kept per shard: at least 1.
fn retain_count(lit: LitInt) -> syn::Result<(u64, LitInt)> {
    let n: u64 = lit.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "retain_count must be at least 1: leave `retain` out to keep no records",
        ));
    }
    Ok((n, lit))
}

/// `true` or `false`.
fn events(lit: &Lit) -> syn::Result<bool> {
    match lit {
        Lit::Bool(b) => Ok(b.value),
        other => Err(syn::Error::new(
            other.span(),
            "`events` is `true` or `false`: `events = true` turns the topic's job events on",
        )),
    }
}

/// The most events kept per shard: at least 1.
fn events_cap(lit: LitInt) -> syn::Result<(u64, LitInt)> {
    let n: u64 = lit.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "events_cap must be at least 1: leave `events` out to keep no events",
        ));
    }
    Ok((n, lit))
}

/// The most jobs the topic may hold pending: at least 1.
fn max_pending(lit: &LitInt) -> syn::Result<u64> {
    let n: u64 = lit.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "max_pending must be at least 1: leave it out for no bound",
        ));
    }
    Ok(n)
}

/// The most jobs running at once in all processes: at least 1.
fn global_concurrency(lit: &LitInt) -> syn::Result<u32> {
    let n: u32 = lit.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "global_concurrency must be at least 1: leave it out for no limit",
        ));
    }
    Ok(n)
}

/// The most jobs of one group holding a slot at once: at least 1.
fn group_concurrency(lit: &LitInt) -> syn::Result<u32> {
    let n: u32 = lit.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "group_concurrency must be at least 1 (1, the default, runs a group's jobs one at a time)",
        ));
    }
    Ok(n)
}

/// A rate limit, `<count>/<period>` (the runtime's own rule, `dq_syntax::parse_rate`).
fn rate(lit: &LitStr) -> syn::Result<(u64, Duration)> {
    dq_syntax::parse_rate(&lit.value())
        .map_err(|why| syn::Error::new(lit.span(), format!("invalid rate: {why}")))
}

/// A duration, or `None` for `"none"` (no limit).
fn timeout(lit: &LitStr) -> syn::Result<Option<Duration>> {
    if lit.value() == "none" {
        return Ok(None);
    }
    attr::duration(lit).map(Some)
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

/// Checks the schedule a listener declares for what can be checked without the zone database
/// (the expression and the zone are checked by `Runtime::start`, as for a listener built by
/// hand).
pub(crate) fn check_schedule(options: &Options, payload: &Type) -> syn::Result<()> {
    match (&options.cron, options.every, &options.tz) {
        (None, None, None) if options.missed.is_none() => return Ok(()),
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
    Ok(())
}

/// `retain_count` goes with `retain`, which says how long the records are kept.
pub(crate) fn check_retention(options: &Options) -> syn::Result<()> {
    match (&options.retain, &options.retain_count) {
        (None, Some((_, lit))) => Err(syn::Error::new(
            lit.span(),
            "`retain_count` goes with `retain`, which says how long the records of succeeded jobs are kept: add `retain = \"1h\"`",
        )),
        _ => Ok(()),
    }
}

/// `events_cap` goes with `events = true`, which turns the events on.
pub(crate) fn check_events(options: &Options) -> syn::Result<()> {
    match (options.events, &options.events_cap) {
        (None | Some(false), Some((_, lit))) => Err(syn::Error::new(
            lit.span(),
            "`events_cap` goes with `events = true`, which turns the topic's job events on",
        )),
        _ => Ok(()),
    }
}

fn type_name_is(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == name),
        _ => false,
    }
}

/// The builder calls that apply the options to the listener `Listener::new` made: the calls a
/// listener written by hand makes, so both mean the same.
pub(crate) fn builder_calls(options: &Options, payload: &Type, krate: &syn::Path) -> TokenStream {
    let mut calls = TokenStream::new();
    if let Some(n) = options.concurrency {
        calls.extend(quote!(.concurrency(#n)));
    }
    match options.timeout {
        Some(Some(d)) => {
            let d = attr::duration_tokens(d);
            calls.extend(quote!(.timeout(#d)));
        }
        Some(None) => calls.extend(quote!(.no_timeout())),
        None => {}
    }
    if let Some(n) = options.retries {
        calls.extend(quote!(.retries(#n)));
    }
    if let Some(b) = &options.backoff {
        calls.extend(quote!(.backoff(#krate::Backoff::#b)));
    }
    if let Some(d) = options.retain {
        let d = attr::duration_tokens(d);
        calls.extend(quote!(.retain(#d)));
    }
    if let Some((n, _)) = &options.retain_count {
        calls.extend(quote!(.retain_count(#n)));
    }
    if options.events == Some(true) {
        calls.extend(quote!(.events(true)));
    }
    if let Some((n, _)) = &options.events_cap {
        calls.extend(quote!(.events_cap(#n)));
    }
    if let Some(n) = options.max_pending {
        calls.extend(quote!(.max_pending(#n)));
    }
    if let Some(n) = options.global_concurrency {
        calls.extend(quote!(.global_concurrency(#n)));
    }
    if let Some(n) = options.group_concurrency {
        calls.extend(quote!(.group_concurrency(#n)));
    }
    if let Some((n, period)) = options.rate {
        let period = attr::duration_tokens(period);
        calls.extend(quote!(.rate(#krate::Rate::new(#n, #period).expect("the rate was checked by #[dq::listener]"))));
    }
    if let Some((n, period)) = options.group_rate {
        let period = attr::duration_tokens(period);
        calls.extend(quote!(.group_rate(#krate::Rate::new(#n, #period).expect("the group rate was checked by #[dq::listener]"))));
    }
    calls.extend(schedule_calls(options, payload, krate));
    calls
}

/// `.cron(..)`, `.tz(..)`, `.every(..)`, `.missed(..)` and what each tick carries, for a
/// listener with a schedule (checked by [`check_schedule`]).
fn schedule_calls(options: &Options, payload: &Type, krate: &syn::Path) -> TokenStream {
    if options.cron.is_none() && options.every.is_none() {
        return TokenStream::new();
    }
    let mut calls = TokenStream::new();
    if let Some(expr) = &options.cron {
        calls.extend(quote!(.cron(#expr)));
    }
    if let Some(zone) = &options.tz {
        calls.extend(quote!(.tz(#zone)));
    }
    if let Some(d) = options.every {
        let d = attr::duration_tokens(d);
        calls.extend(quote!(.every(#d)));
    }
    if let Some(policy) = &options.missed {
        calls.extend(quote!(.missed(#krate::schedule::Missed::#policy)));
    }
    // Spanned by the payload type: a type that is neither a Tick nor a Default message is
    // reported there. (The builder's `ticks_carry_default` would also need it to be named
    // apart from a Tick, which the macro cannot tell by the type's name.)
    let ticks = quote_spanned!(payload.span()=>
        <#payload as #krate::__private::TickPayload>::tick_payload
    );
    calls.extend(quote!(.with_tick_payload(#ticks)));
    calls
}

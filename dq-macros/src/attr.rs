//! Values shared by both macros: topics, durations, the crate path.

use proc_macro2::TokenStream;
use quote::quote;
use syn::LitStr;

/// Checks a topic literal with the rules of `dq::Topic`, so a bad topic fails the build.
pub(crate) fn topic(lit: &LitStr) -> syn::Result<LitStr> {
    let value = lit.value();
    let problem = if value.is_empty() {
        Some("a topic must not be empty")
    } else if value.len() > 128 {
        Some("a topic is at most 128 bytes long")
    } else if value
        .bytes()
        .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    {
        Some("a topic may hold only ASCII letters, digits, '-', '_' and '.'")
    } else {
        None
    };
    match problem {
        Some(reason) => Err(syn::Error::new(
            lit.span(),
            format!("invalid topic {value:?}: {reason}"),
        )),
        None => Ok(lit.clone()),
    }
}

/// Parses `250ms`, `5s`, `1.5s`, `10m`, `2h` into nanoseconds.
pub(crate) fn duration_nanos(lit: &LitStr) -> syn::Result<u64> {
    let text = lit.value();
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = |why: &str| syn::Error::new(lit.span(), format!("invalid duration {text:?}: {why}"));
    let number: f64 = number
        .parse()
        .map_err(|_| bad("expected a number followed by ms, s, m or h, as in \"5s\""))?;
    let scale = match unit.trim() {
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        "" => return Err(bad("add a unit: ms, s, m or h, as in \"5s\"")),
        _ => return Err(bad("unknown unit; use ms, s, m or h")),
    };
    let nanos = number * scale;
    if !(1.0..1e18).contains(&nanos) {
        return Err(bad("must be positive and less than 30 years"));
    }
    Ok(nanos as u64)
}

pub(crate) fn duration_tokens(nanos: u64) -> TokenStream {
    quote!(::core::time::Duration::from_nanos(#nanos))
}

pub(crate) fn crate_path(lit: Option<LitStr>) -> syn::Result<syn::Path> {
    match lit {
        Some(l) => l.parse(),
        None => Ok(syn::parse_quote!(::dq)),
    }
}

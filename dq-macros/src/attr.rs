//! Values shared by both macros: topics, durations, the crate path.

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::quote;
use syn::LitStr;

/// Checks a topic literal with the rules of `dq::Topic`, so a bad topic fails the build.
pub(crate) fn topic(lit: &LitStr) -> syn::Result<LitStr> {
    let value = lit.value();
    match dq_syntax::topic_problem(&value) {
        Some(reason) => Err(syn::Error::new(
            lit.span(),
            format!("invalid topic {value:?}: {reason}"),
        )),
        None => Ok(lit.clone()),
    }
}

/// Parses a positive duration (`250ms`, `5s`, `1.5s`, `10m`, `2h`, `1d`) as the `DQ_*`
/// variables do.
pub(crate) fn duration(lit: &LitStr) -> syn::Result<Duration> {
    let bad = |why: String| syn::Error::new(lit.span(), format!("invalid duration: {why}"));
    let d = dq_syntax::parse_duration(&lit.value()).map_err(bad)?;
    if d.is_zero() {
        return Err(bad(format!("{:?} must be positive", lit.value())));
    }
    Ok(d)
}

pub(crate) fn duration_tokens(d: Duration) -> TokenStream {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

pub(crate) fn crate_path(lit: Option<LitStr>) -> syn::Result<syn::Path> {
    match lit {
        Some(l) => l.parse(),
        None => Ok(syn::parse_quote!(::dq)),
    }
}

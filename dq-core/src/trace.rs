//! Traces across processes (feature `otel`): a push records the W3C trace context of the span
//! it is made in, and the run of the job, in whatever process, continues that trace.
//!
//! A job's trace context ([`NewJob::trace`](crate::NewJob::trace),
//! [`Envelope::trace`](crate::Envelope::trace)) is text:
//!
//! ```text
//! 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//! 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nrojo=00f067aa0ba902b7,congo=t61rcWkgMzE
//! link 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//! ```
//!
//! the span's W3C `traceparent` (version, trace id, span id, flags), then, when its trace state
//! is not empty, a newline and the `tracestate`. The job of a schedule's tick carries `link `
//! first: its runs link to the span that fired it rather than run inside it.
//!
//! The run's `job` span is the child of the push's span on the job's first run, so one trace
//! goes from the request that pushed the job to its handler. A later run (a retry) and the run
//! of a tick get a link to that span instead and start traces of their own: a retry an hour
//! later is not drawn inside a request that ended long before. A context that does not read as
//! W3C trace context is logged and left out; the job runs as any.
//!
//! Nothing here needs a tracer of its own: the spans are `tracing`'s, and the program's
//! `tracing-opentelemetry` layer exports them. Without that layer a push records nothing (its
//! span has no valid OpenTelemetry context) and a run continues nothing.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::lease::LeasedJob;

/// What a tick's trace context starts with: its runs link to it.
const LINK: &str = "link ";

/// The W3C trace context of the current span, as a push records it (see the module
/// documentation for the text); `None` outside any span, or when the span has no valid
/// OpenTelemetry context (no `tracing-opentelemetry` layer).
pub fn current() -> Option<String> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let flags = (sc.trace_flags() & TraceFlags::SAMPLED).to_u8();
    let mut text = format!("00-{}-{}-{flags:02x}", sc.trace_id(), sc.span_id());
    let state = sc.trace_state().header();
    if !state.is_empty() {
        text.push('\n');
        text.push_str(&state);
    }
    Some(text)
}

/// The trace context a push records: the current span's, marked for a link when the job is a
/// schedule's tick.
pub(crate) fn of_push(tick: bool) -> Option<String> {
    let trace = current()?;
    Some(if tick {
        format!("{LINK}{trace}")
    } else {
        trace
    })
}

/// Prepares `span`, the span of `job`'s run, which must not have been entered yet: marks it as
/// the processing of a dq message (`messaging.system = "dq"`, `messaging.operation.type =
/// "process"`, the topic as `messaging.destination.name`, the id as `messaging.message.id`),
/// and continues the trace the push recorded: the child of the push's span on the job's first
/// run, a link to it on a later run and on a tick's. A trace context that does not read as W3C
/// trace context is logged (a warning in the span) and left out.
pub fn continue_run(span: &tracing::Span, job: &LeasedJob) {
    span.set_attribute("messaging.system", "dq");
    span.set_attribute("messaging.operation.type", "process");
    span.set_attribute("messaging.destination.name", job.lease.topic.to_string());
    span.set_attribute("messaging.message.id", job.lease.id.to_string());
    let Some(trace) = job.envelope.trace.as_deref() else {
        return;
    };
    let (link, text) = match trace.strip_prefix(LINK) {
        Some(rest) => (true, rest),
        None => (false, trace),
    };
    let Some(pushed) = parse(text) else {
        span.in_scope(|| {
            tracing::warn!(
                trace,
                "the job's trace context does not read as W3C trace context; its run starts a trace of its own"
            );
        });
        return;
    };
    if link || job.envelope.attempt > 1 {
        span.add_link(pushed);
    } else {
        // Fails only when there is nothing to continue: no OpenTelemetry layer, or a span
        // filtered out.
        let _ = span.set_parent(Context::new().with_remote_span_context(pushed));
    }
}

/// Reads a trace context written by [`current`] (without the link mark); `None` when it is not
/// one: a `traceparent` of version `00` with lower-case hex ids of their full length, not all
/// zero.
fn parse(text: &str) -> Option<SpanContext> {
    let (parent, state) = text.split_once('\n').unwrap_or((text, ""));
    let mut parts = parent.split('-');
    let (Some("00"), Some(trace_id), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if !(lower_hex(trace_id, 32) && lower_hex(span_id, 16) && lower_hex(flags, 2)) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?) & TraceFlags::SAMPLED;
    // A trace state that does not read is dropped, as a W3C propagator drops it.
    let state = match state {
        "" => TraceState::NONE,
        text => text.parse().unwrap_or(TraceState::NONE),
    };
    let cx = SpanContext::new(trace_id, span_id, flags, true, state);
    cx.is_valid().then_some(cx)
}

/// Whether `text` is `len` lower-case hex digits.
fn lower_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_back_as_a_remote_sampled_span_context() {
        let cx = parse(PARENT).unwrap();
        assert_eq!(
            cx.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(cx.span_id().to_string(), "00f067aa0ba902b7");
        assert!(cx.is_sampled() && cx.is_remote());
        assert_eq!(cx.trace_state().header(), "");
    }

    #[test]
    fn the_trace_state_after_the_newline_is_kept() {
        let cx = parse(&format!(
            "{PARENT}\nrojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
        ))
        .unwrap();
        assert_eq!(cx.trace_state().get("congo"), Some("t61rcWkgMzE"));
        assert_eq!(cx.trace_state().get("rojo"), Some("00f067aa0ba902b7"));
    }

    #[test]
    fn what_is_not_a_w3c_trace_context_reads_as_none() {
        for text in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            assert!(parse(text).is_none(), "{text:?}");
        }
    }
}

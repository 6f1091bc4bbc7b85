//! A topic's actions: pause and resume it, retry or delete every dead letter.

use std::time::Duration;

use axum::extract::Path;
use axum::response::Response;

use super::post::Post;
use super::topic_page;

pub(crate) async fn pause(Path(topic): Path<String>, post: Post) -> Response {
    set_paused(post, topic, true).await
}

pub(crate) async fn resume(Path(topic): Path<String>, post: Post) -> Response {
    set_paused(post, topic, false).await
}

async fn set_paused(post: Post, topic: String, pause: bool) -> Response {
    let to = post.return_to(topic_page(&post.viewer, &topic));
    let client = &post.web.client;
    let done = if pause {
        client.pause(&topic).await
    } else {
        client.resume(&topic).await
    };
    if let Err(e) = done {
        return post.store_error(&format!("pause or resume {topic:?}"), &e);
    }
    let verb = if pause { "Paused" } else { "Resumed" };
    tracing::info!(topic, "dq dashboard: {} topic", verb.to_lowercase());
    post.back(&to, &format!("{verb} {topic}."))
}

pub(crate) async fn retry_all_dead(Path(topic): Path<String>, post: Post) -> Response {
    let to = post.return_to(topic_page(&post.viewer, &topic));
    match post.web.client.retry_dead(&topic, &[]).await {
        Ok(n) => {
            tracing::info!(topic, n, "dq dashboard: retried every dead letter");
            post.back(&to, &format!("{} run again.", dead_letters(n)))
        }
        Err(e) => post.store_error(&format!("retry the dead letters of {topic:?}"), &e),
    }
}

pub(crate) async fn purge_all_dead(Path(topic): Path<String>, post: Post) -> Response {
    let to = post.return_to(topic_page(&post.viewer, &topic));
    match post.web.client.purge_dead(&topic, Duration::ZERO).await {
        Ok(n) => {
            tracing::info!(topic, n, "dq dashboard: deleted every dead letter");
            post.back(&to, &format!("{} deleted.", dead_letters(n)))
        }
        Err(e) => post.store_error(&format!("delete the dead letters of {topic:?}"), &e),
    }
}

/// "1 dead letter", "3 dead letters".
fn dead_letters(n: usize) -> String {
    format!("{n} dead letter{}", if n == 1 { "" } else { "s" })
}

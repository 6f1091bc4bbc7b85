//! A workflow's steps as inline SVG: one box a step, in layers from left to right (a step's
//! layer is one more than the deepest of the steps it comes after), and an arrow from each
//! step to each step that comes after it, marked with the policy when a failure does not
//! simply cancel the step after it.
//!
//! Unlike the charts, the graph holds text of the store (step names, topics, values, errors):
//! it is written with maud, which escapes it, and only the numbers of the geometry are
//! formatted by hand. No script is needed to draw it.

use std::collections::HashMap;

use dq_core::workflow::OnFailure;
use maud::{html, Markup};

use crate::view::clip;

/// A box's width and height.
const BOX_W: u64 = 200;
const BOX_H: u64 = 76;
/// The room between two layers (where the arrows bend) and between two boxes of a layer.
const GAP_X: u64 = 64;
const GAP_Y: u64 = 18;
/// The margin around the graph.
const PAD: u64 = 8;
/// The characters of a line that fit in a box (the whole text is in the box's title).
const LINE: usize = 28;

/// One step as the graph draws it.
pub(crate) struct Node<'a> {
    /// Its name within the workflow.
    pub(crate) name: &'a str,
    /// Its job's topic.
    pub(crate) topic: &'a str,
    /// Its job's id.
    pub(crate) id: &'a str,
    /// What it is: `blocked`, `succeeded`, `failed` or `cancelled`, and for a pending step its
    /// job's state (`delayed`, `ready`, `running`; `pending` when its job was not found).
    pub(crate) state: &'static str,
    /// The steps it comes after, with their policies.
    pub(crate) after: &'a [(String, OnFailure)],
    /// The error that killed it, once it failed.
    pub(crate) error: Option<&'a str>,
    /// What its handler returned, on one line, once it succeeded with a value.
    pub(crate) value: Option<String>,
    /// Its job's page, while the job is kept.
    pub(crate) link: Option<String>,
}

/// Each node's layer: 0 for a step that comes after none, else one more than the deepest of
/// the steps it comes after. Taken in Kahn's order, so each arrow is looked at once; a
/// dependency on a step the workflow does not have is left out, and a step on a cycle (a
/// push refuses them) stays where its other dependencies put it.
pub(crate) fn layers(nodes: &[Node<'_>]) -> Vec<usize> {
    let index = by_name(nodes);
    let deps: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            n.after
                .iter()
                .filter_map(|(dep, _)| index.get(dep.as_str()).copied())
                .collect()
        })
        .collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(i);
        }
    }
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut layer = vec![0; nodes.len()];
    let mut next: Vec<usize> = (0..nodes.len()).filter(|&i| waiting[i] == 0).collect();
    while let Some(i) = next.pop() {
        for &j in &dependents[i] {
            layer[j] = layer[j].max(layer[i] + 1);
            waiting[j] -= 1;
            if waiting[j] == 0 {
                next.push(j);
            }
        }
    }
    layer
}

/// Each node's index, by its name.
fn by_name<'a>(nodes: &[Node<'a>]) -> HashMap<&'a str, usize> {
    nodes.iter().enumerate().map(|(i, n)| (n.name, i)).collect()
}

/// An arrow from a step to one that comes after it.
struct Arrow<'a> {
    from: &'a str,
    to: &'a str,
    policy: OnFailure,
    /// The SVG path: a curve from the right side of one box to the left side of the other.
    path: String,
    /// Where its policy is written: the middle of the curve.
    middle: (u64, u64),
}

/// The graph of `nodes`, each in its layer (`layer`, from [`layers`]), the boxes of a layer in
/// the order the steps were added. A box links to its job's page while the job is kept.
pub(crate) fn workflow_graph(nodes: &[Node<'_>], layer: &[usize]) -> Markup {
    let columns = layer.iter().max().map_or(0, |l| l + 1);
    // Each box's top left corner.
    let mut rows = vec![0u64; columns];
    let mut at: Vec<(u64, u64)> = Vec::with_capacity(nodes.len());
    for &l in layer {
        let row = rows[l];
        rows[l] += 1;
        at.push((
            PAD + l as u64 * (BOX_W + GAP_X),
            PAD + row * (BOX_H + GAP_Y),
        ));
    }
    let (columns, tallest) = (columns as u64, rows.iter().max().copied().unwrap_or(0));
    let width = 2 * PAD + columns * BOX_W + columns.saturating_sub(1) * GAP_X;
    let height = 2 * PAD + tallest * BOX_H + tallest.saturating_sub(1) * GAP_Y;
    let arrows = arrows(nodes, &at);
    let label = format!(
        "The workflow's {} steps in {columns} layers, each after the steps it comes after",
        nodes.len()
    );
    html! {
        svg.graph viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height)
            role="group" aria-label=(label) {
            defs {
                marker id="dq-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
                    markerHeight="7" orient="auto" {
                    path d="M0,0 L10,5 L0,10 z" {}
                }
            }
            // The arrows first: the boxes are drawn over them.
            @for a in &arrows {
                path class={ "edge " (a.policy.as_str()) } data-from=(a.from) data-to=(a.to)
                    d=(a.path) marker-end="url(#dq-arrow)" {}
                @if a.policy != OnFailure::Cancel {
                    text.policy x=(a.middle.0) y=(a.middle.1) text-anchor="middle" {
                        (a.policy.as_str())
                    }
                }
            }
            @for ((node, &(x, y)), &l) in nodes.iter().zip(&at).zip(layer) {
                @let drawn = step_box(node, x, y, l + 1);
                @if let Some(link) = &node.link {
                    a href=(link) { (drawn) }
                } @else {
                    (drawn)
                }
            }
        }
    }
}

/// An arrow from each step to each step that comes after it (`at`: each box's top left).
fn arrows<'a>(nodes: &[Node<'a>], at: &[(u64, u64)]) -> Vec<Arrow<'a>> {
    let index = by_name(nodes);
    let mut arrows = Vec::new();
    for (node, &(x2, y2)) in nodes.iter().zip(at) {
        for (dep, policy) in node.after {
            let Some(&j) = index.get(dep.as_str()) else {
                continue;
            };
            let (from_x, from_y) = at[j];
            let (x1, y1) = (from_x + BOX_W, from_y + BOX_H / 2);
            let y2 = y2 + BOX_H / 2;
            let bend = GAP_X / 2;
            let path = format!(
                "M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}",
                x1 + bend,
                x2.saturating_sub(bend)
            );
            arrows.push(Arrow {
                from: nodes[j].name,
                to: node.name,
                policy: *policy,
                path,
                middle: ((x1 + x2) / 2, (y1 + y2) / 2 - 4),
            });
        }
    }
    arrows
}

/// One step's box at `x`, `y`: its name, topic and state, and its error or value, clipped
/// (the whole of each in the box's title).
fn step_box(node: &Node<'_>, x: u64, y: u64, layer: usize) -> Markup {
    let error = node.error.map(|e| e.replace(['\n', '\r'], " "));
    html! {
        g.step data-step=(node.name) data-state=(node.state) data-layer=(layer) {
            title {
                (node.name) " (job " (node.id) " of " (node.topic) "): " (node.state)
                @if let Some(error) = &error { "; error: " (error) }
                @if let Some(value) = &node.value { "; value: " (value) }
            }
            rect class={ "box " (node.state) } x=(x) y=(y) width=(BOX_W) height=(BOX_H) rx="4" {}
            text.name x=(x + 8) y=(y + 17) { (clip(node.name, LINE)) }
            text.topic x=(x + 8) y=(y + 33) { (clip(node.topic, LINE)) }
            text class={ "state " (node.state) } x=(x + 8) y=(y + 49) { (node.state) }
            @if let Some(error) = &error {
                text.error x=(x + 8) y=(y + 66) { (clip(error, LINE)) }
            } @else if let Some(value) = &node.value {
                text.value x=(x + 8) y=(y + 66) { (clip(value, LINE)) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node<'a>(name: &'a str, after: &'a [(String, OnFailure)]) -> Node<'a> {
        Node {
            name,
            topic: "t",
            id: name,
            state: "blocked",
            after,
            error: None,
            value: None,
            link: None,
        }
    }

    fn after(names: &[&str]) -> Vec<(String, OnFailure)> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), OnFailure::Cancel))
            .collect()
    }

    #[test]
    fn a_step_is_one_layer_after_the_deepest_step_it_comes_after() {
        // Added out of order: d first, and e after a and d (a is 0, d is 2: e is 3).
        let (d, e, b, c) = (
            after(&["b", "c"]),
            after(&["a", "d"]),
            after(&["a"]),
            after(&["a"]),
        );
        let nodes = [
            node("d", &d),
            node("e", &e),
            node("a", &[]),
            node("b", &b),
            node("c", &c),
        ];
        assert_eq!(layers(&nodes), [2, 3, 0, 1, 1]);
        let drawn = workflow_graph(&nodes, &layers(&nodes)).into_string();
        assert_eq!(drawn.matches(r#"<g class="step""#).count(), 5);
        assert_eq!(drawn.matches(r#"class="edge cancel""#).count(), 6);
        assert!(drawn.contains(r#"data-step="e" data-state="blocked" data-layer="4""#));
    }
}

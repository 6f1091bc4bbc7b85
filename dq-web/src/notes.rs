//! The notes of the last actions ("o1 was deleted."), kept by the router for the page each
//! action redirects to.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use crate::secret::constant_time_eq;

/// The notes of the last actions, for the page each redirects to: the redirect carries a
/// random key (`?note=<key>`), never the text, so a link made elsewhere shows nothing.
#[derive(Default)]
pub(crate) struct Notes {
    recent: Mutex<VecDeque<(String, String)>>,
}

/// How many notes are kept (the oldest goes first): a note is read right after its action.
const KEPT_NOTES: usize = 256;

impl Notes {
    /// Keeps `text`; returns its key, or `None` when the system gave no random bytes (the page
    /// then shows no note).
    pub(crate) fn put(&self, text: String) -> Option<String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() >= KEPT_NOTES {
            recent.pop_front();
        }
        recent.push_back((key.clone(), text));
        Some(key)
    }

    /// The note kept under `key`, if it is one of the last ones.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent
            .iter()
            .find(|(k, _)| constant_time_eq(k.as_bytes(), key.as_bytes()))
            .map(|(_, text)| text.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn notes_are_found_by_their_key_only() {
        let notes = Notes::default();
        let key = notes.put("o1 was deleted.".into()).unwrap();
        assert_eq!(notes.get(&key).as_deref(), Some("o1 was deleted."));
        assert_eq!(notes.get("Session expired"), None);
        for i in 0..KEPT_NOTES {
            notes.put(format!("note {i}"));
        }
        assert_eq!(notes.get(&key), None, "the oldest goes first");
    }
}

//! Panel sessions, in memory: a login lasts until it expires, the operator logs out, or the
//! daemon restarts (then the operator logs in again; nothing else is lost).
//!
//! A session id is 32 random bytes; the cookie carries it, the map holds it, and each session
//! has its own CSRF token that every POST form must send back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::RngCore;
use subtle::ConstantTimeEq;

/// 32 random bytes, hex: a session id, a CSRF token.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Constant-time equality of two tokens.
pub fn tokens_match(a: &str, b: &str) -> bool {
    !a.is_empty() && a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A one-shot message shown on the next page (POST → redirect → GET).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

#[derive(Debug)]
struct Entry {
    csrf: String,
    expires: Instant,
    flash: Option<Flash>,
}

/// What a page handler gets for a logged-in request.
#[derive(Debug, Clone)]
pub struct PanelSession {
    pub id: String,
    pub csrf: String,
}

#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    max: usize,
    /// A std mutex: every critical section is a map lookup or insert, never held across an
    /// await, so an async lock would buy nothing.
    entries: Mutex<HashMap<String, Entry>>,
}

impl Sessions {
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max: max.max(1),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave the map half-updated (each operation is
        // one insert or remove), so a poisoned lock is still usable.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Starts a session; drops expired ones and, past the cap, the one closest to expiring.
    pub fn create(&self) -> PanelSession {
        let now = Instant::now();
        let session = PanelSession {
            id: random_token(),
            csrf: random_token(),
        };
        let mut entries = self.lock();
        entries.retain(|_, e| e.expires > now);
        while entries.len() >= self.max {
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => entries.remove(&id),
                None => break,
            };
        }
        entries.insert(
            session.id.clone(),
            Entry {
                csrf: session.csrf.clone(),
                expires: now + self.ttl,
                flash: None,
            },
        );
        session
    }

    /// The live session of a cookie value, if any.
    pub fn get(&self, id: &str) -> Option<PanelSession> {
        let now = Instant::now();
        let mut entries = self.lock();
        match entries.get(id) {
            Some(entry) if entry.expires > now => Some(PanelSession {
                id: id.to_owned(),
                csrf: entry.csrf.clone(),
            }),
            Some(_) => {
                entries.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn set_flash(&self, id: &str, flash: Flash) {
        if let Some(entry) = self.lock().get_mut(id) {
            entry.flash = Some(flash);
        }
    }

    pub fn take_flash(&self, id: &str) -> Option<Flash> {
        self.lock().get_mut(id).and_then(|e| e.flash.take())
    }

    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_and_are_capped() {
        let sessions = Sessions::new(Duration::from_millis(30), 2);
        let a = sessions.create();
        assert!(sessions.get(&a.id).is_some());
        assert!(sessions.get("nope").is_none());
        let b = sessions.create();
        let c = sessions.create();
        assert_eq!(sessions.lock().len(), 2, "capped");
        assert!(sessions.get(&a.id).is_none(), "the oldest went");
        assert!(sessions.get(&b.id).is_some() && sessions.get(&c.id).is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(sessions.get(&c.id).is_none(), "expired");
    }

    #[test]
    fn flash_is_shown_once() {
        let sessions = Sessions::new(Duration::from_secs(60), 8);
        let s = sessions.create();
        sessions.set_flash(
            &s.id,
            Flash {
                ok: true,
                text: "saved".into(),
            },
        );
        assert_eq!(
            sessions.take_flash(&s.id).map(|f| f.text),
            Some("saved".into())
        );
        assert_eq!(sessions.take_flash(&s.id), None);
    }

    #[test]
    fn tokens_compare_exactly() {
        let t = random_token();
        assert_eq!(t.len(), 64);
        assert!(tokens_match(&t, &t.clone()));
        assert!(!tokens_match(&t, &random_token()));
        assert!(!tokens_match("", ""));
    }
}
